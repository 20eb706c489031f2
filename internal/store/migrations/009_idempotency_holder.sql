-- An idempotency claim is held by a node's registration (its epoch):
-- while that node renews its lease the others wait for its answer; once
-- the lease lapses (the node crashed, or stalled past it) or the node
-- restarted, the next create with the key takes the claim over.
alter table idempotency add column node text not null default '';
alter table idempotency add column epoch bigint not null default 0;

---- create above / drop below ----

alter table idempotency drop column epoch;
alter table idempotency drop column node;
