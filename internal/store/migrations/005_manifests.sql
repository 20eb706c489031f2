-- The index of the object store's manifests (checkpoints, snapshots,
-- template layers, volume backups), by repository prefix: listing them
-- reads this table, never the object store.
create table manifests (
	prefix text not null,
	id text not null,
	doc bytea not null,
	indexed_at timestamptz not null default now(),
	primary key (prefix, id)
);

---- create above / drop below ----

drop table manifests;
