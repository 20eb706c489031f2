-- Creates with an Idempotency-Key: the first claims the key, the rest get
-- its answer (or wait while it runs). scope is a hash of the caller's
-- credential, the route and the key: a key is the caller's own.
create table idempotency (
	scope text primary key,
	done boolean not null default false,
	status integer not null default 0,
	content_type text not null default '',
	body bytea,
	created_at timestamptz not null default now()
);
create index idempotency_created on idempotency (created_at);

---- create above / drop below ----

drop table idempotency;
