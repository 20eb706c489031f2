-- Secrets for the egress gateway, shared by every node: sealed records
-- (the value encrypted under the cluster's secrets keyset, itself sealed
-- under the platform key in cluster_keys; only nodes hold that key).
create table secrets (
	name text primary key,
	record bytea not null
);

create table cluster_keys (
	name text primary key,
	sealed bytea not null
);

-- Every node reloads its secrets when one changes.
create function space_secrets_changed() returns trigger language plpgsql as $$
begin
	perform pg_notify('space_secrets', '');
	return null;
end $$;

create trigger secrets_changed after insert or update or delete on secrets
	for each statement execute function space_secrets_changed();

---- create above / drop below ----

drop trigger secrets_changed on secrets;
drop function space_secrets_changed();
drop table cluster_keys;
drop table secrets;
