-- The API's lists page through the catalog in SQL, newest first: a page
-- of a tenant's sandboxes in a state (or of every tenant's, for the
-- admin) is a range of an index, however many records there are.
alter table sandboxes add column created_at timestamptz not null default now();
update sandboxes set created_at = (doc->>'created_at')::timestamptz where doc ? 'created_at';
drop index sandboxes_tenant_state;
create index sandboxes_tenant_list on sandboxes (tenant, state, created_at desc, id desc);
create index sandboxes_list on sandboxes (state, created_at desc, id desc);

---- create above / drop below ----

drop index sandboxes_list;
drop index sandboxes_tenant_list;
create index sandboxes_tenant_state on sandboxes (tenant, state);
alter table sandboxes drop column created_at;
