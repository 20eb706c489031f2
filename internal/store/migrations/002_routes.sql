-- Routing: every node caches where sandboxes run and drops an entry when
-- this says the sandbox moved (created, resumed, paused, ended, deleted).
create function space_route_changed() returns trigger language plpgsql as $$
begin
	if tg_op = 'DELETE' then
		perform pg_notify('space_routes', old.id);
	elsif tg_op = 'INSERT' or old.node is distinct from new.node or old.live is distinct from new.live then
		perform pg_notify('space_routes', new.id);
	end if;
	return null;
end $$;

create trigger sandboxes_route_changed after insert or update or delete on sandboxes
	for each row execute function space_route_changed();

-- Tenants and keys: every node reloads them when one changes (a key
-- revoked on one node stops working on all).
create function space_tenants_changed() returns trigger language plpgsql as $$
begin
	perform pg_notify('space_tenants', '');
	return null;
end $$;

create trigger tenants_changed after insert or update or delete on tenants
	for each statement execute function space_tenants_changed();
create trigger api_keys_changed after insert or update or delete on api_keys
	for each statement execute function space_tenants_changed();

-- The secret nodes sign forwarded requests with: one row, made by the
-- first node that asks (from its crypto/rand); only holders of the
-- database credentials can read it.
create table cluster_secret (
	id boolean primary key default true check (id),
	secret bytea not null
);

---- create above / drop below ----

drop table cluster_secret;
drop trigger api_keys_changed on api_keys;
drop trigger tenants_changed on tenants;
drop function space_tenants_changed();
drop trigger sandboxes_route_changed on sandboxes;
drop function space_route_changed();
