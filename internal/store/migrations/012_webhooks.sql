-- Webhook registrations (E2B's /events/webhooks), shared by every node: a
-- tenant registers on any node and every node delivers its own events.
-- The signature secret in doc is sealed under the secrets keyset.
create table webhooks (
	id text primary key,
	doc jsonb not null
);

-- Each node's queue of deliveries, oldest first; a webhook's deletion
-- drops what it still had queued.
create table webhook_deliveries (
	seq bigserial primary key,
	node text not null,
	webhook text not null references webhooks (id) on delete cascade,
	doc jsonb not null
);
create index webhook_deliveries_node on webhook_deliveries (node, seq);

---- create above / drop below ----

drop table webhook_deliveries;
drop table webhooks;
