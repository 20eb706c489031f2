-- The cluster catalog: every record is its JSON document (doc) with the
-- columns queries filter on beside it. A node holds a sandbox while the
-- sandbox is live (node, slot); paused and ended records belong to no node.

create table sandboxes (
	id text primary key,
	node text not null default '',
	tenant text not null default '',
	state text not null,
	live boolean not null,
	slot integer not null default -1,
	doc jsonb not null,
	updated_at timestamptz not null default now()
);
-- A node's network slots are its own: one sandbox per (node, slot).
create unique index sandboxes_node_slot on sandboxes (node, slot) where slot >= 0;
create index sandboxes_node_live on sandboxes (node) where live;
create index sandboxes_tenant_state on sandboxes (tenant, state);

create table nodes (
	id text primary key,
	address text not null default '',
	-- epoch goes up at each registration: a node that finds its lease
	-- lapsed registers again and reconciles what it runs.
	epoch bigint not null default 1,
	started_at timestamptz not null default now(),
	lease_until timestamptz not null,
	info jsonb not null default '{}'
);

create table templates (
	name text primary key,
	tenant text not null default '',
	doc jsonb not null
);

create table builds (
	id text primary key,
	node text not null default '',
	template text not null,
	doc jsonb not null
);
create index builds_node on builds (node);

create table tenants (
	id text primary key,
	doc jsonb not null
);

create table api_keys (
	id text primary key,
	tenant text not null,
	doc jsonb not null
);

create table audit (
	seq bigserial primary key,
	at timestamptz not null,
	doc jsonb not null
);
create index audit_at on audit (at, seq);

-- Volumes hold data on one node's disk: names are unique per node.
create table volumes (
	id text primary key,
	node text not null,
	name text not null,
	doc jsonb not null,
	unique (node, name)
);

---- create above / drop below ----

drop table volumes;
drop table audit;
drop table api_keys;
drop table tenants;
drop table builds;
drop table templates;
drop table nodes;
drop table sandboxes;
