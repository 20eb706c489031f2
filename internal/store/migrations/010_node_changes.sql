-- Routes name a node's address: every node drops its cached routes to a
-- node when the node registers (again: a new address or a restart) or
-- leaves the table. Lease renewals change neither and notify nothing.
create function space_node_changed() returns trigger language plpgsql as $$
begin
	if tg_op = 'DELETE' then
		perform pg_notify('space_nodes', old.id);
	elsif tg_op = 'INSERT' or old.address is distinct from new.address or old.epoch is distinct from new.epoch then
		perform pg_notify('space_nodes', new.id);
	end if;
	return null;
end $$;

create trigger nodes_changed after insert or update or delete on nodes
	for each row execute function space_node_changed();

---- create above / drop below ----

drop trigger nodes_changed on nodes;
drop function space_node_changed();
