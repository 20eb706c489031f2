-- Drain: a draining node takes no new sandboxes and moves its running
-- ones to other nodes, each paused to the object store on its node and
-- resumed by the node a row here names.
alter table nodes add column draining boolean not null default false;

create table migrations (
	sandbox text primary key,
	from_node text not null,
	to_node text not null,
	-- the time the sandbox had left when it was paused
	timeout_ms bigint not null,
	requested_at timestamptz not null default now(),
	paused_at timestamptz,
	resumed_at timestamptz,
	error text not null default ''
);

-- The target node hears of a migration once its sandbox is paused.
create function space_migration_changed() returns trigger language plpgsql as $$
begin
	if new.paused_at is not null and new.resumed_at is null and new.error = '' then
		perform pg_notify('space_migrations', new.sandbox);
	end if;
	return null;
end $$;

create trigger migrations_changed after insert or update on migrations
	for each row execute function space_migration_changed();

---- create above / drop below ----

drop trigger migrations_changed on migrations;
drop function space_migration_changed();
drop table migrations;
alter table nodes drop column draining;
