package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// OpenPostgresTraced opens the catalog with tr told of every statement it
// runs.
func OpenPostgresTraced(ctx context.Context, url, node string, tr pgx.QueryTracer) (*Postgres, error) {
	return openPostgres(ctx, url, node, tr)
}
