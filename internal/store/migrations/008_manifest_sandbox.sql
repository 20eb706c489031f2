-- The manifest index by sandbox: a resume of a sandbox the catalog has
-- no record of, or the list of one sandbox's snapshots, reads that
-- sandbox's manifests, not every manifest of the cluster.
alter table manifests add column sandbox text not null default '';
update manifests set sandbox = coalesce(convert_from(doc, 'UTF8')::jsonb->>'sandbox_id', '');
create index manifests_sandbox on manifests (prefix, sandbox);

---- create above / drop below ----

drop index manifests_sandbox;
alter table manifests drop column sandbox;
