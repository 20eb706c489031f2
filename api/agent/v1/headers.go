package agentv1

// Headers of Agent.Exec beside its messages.
const (
	// IdempotencyKeyHeader carries a start's idempotency key: a start with
	// the key of a process the agent still knows (running, or ended within
	// its retention) starts nothing and streams that process instead.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on the answer to such a start.
	ReplayedHeader = "Idempotent-Replayed"
)
