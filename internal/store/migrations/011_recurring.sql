-- What a node asks of the catalog again and again reads an index, not the
-- table: the prune's stale records (ended, or paused past the retention),
-- the images paused sandboxes hold (template collection and information)
-- and the paused sandboxes that mount a volume. A node's own live records
-- are sandboxes_node_live; a tenant's paused ones a range of
-- sandboxes_tenant_list.
alter table sandboxes add column ended_at timestamptz;
alter table sandboxes add column paused_at timestamptz;
alter table sandboxes add column image text not null default '';
update sandboxes set ended_at = (doc->>'ended_at')::timestamptz, paused_at = (doc->>'paused_at')::timestamptz,
	image = coalesce(doc->>'image', '')
	where doc ? 'ended_at' or doc ? 'paused_at' or doc ? 'image';
create index sandboxes_ended on sandboxes (ended_at) where not live;
create index sandboxes_paused on sandboxes (paused_at) where state = 'paused';
create index sandboxes_paused_image on sandboxes (image) where state = 'paused';
create index sandboxes_paused_volumes on sandboxes (id) where state = 'paused' and doc ? 'volumes';

---- create above / drop below ----

drop index sandboxes_paused_volumes;
drop index sandboxes_paused_image;
drop index sandboxes_paused;
drop index sandboxes_ended;
alter table sandboxes drop column image;
alter table sandboxes drop column paused_at;
alter table sandboxes drop column ended_at;
