-- Pulse schema, version 5: a job's (tenant, name) is unique through job_names, not through an
-- index on scheduled_jobs.
-- Every firing updates its job row twice (claim, end of the attempt), and neither update can be
-- HOT (each changes next_run_at or status, which the partial indexes read), so each writes an
-- entry into every index of scheduled_jobs. The UNIQUE (tenant, name) index was one of four and
-- the only one no hot statement reads; its entries and uniqueness checks cost about a sixth of
-- the database's CPU per firing (pgbench, Pulse's step statement: 0.127 -> 0.103 ms). The names
-- now live in job_names, written when a job is created (the trigger below, so every INSERT into
-- scheduled_jobs keeps it whole, bulk loads included) and never by a firing. Lookups by name go
-- through its primary key; scheduled_jobs keeps tenant and name as columns (the claim returns
-- them). A version-4 node's upsert (ON CONFLICT (tenant, name)) fails against this schema: add
-- and change jobs from upgraded nodes during a rolling upgrade; claiming is not affected.
CREATE TABLE job_names (
    tenant text NOT NULL,
    name   text NOT NULL,
    job_id bigint NOT NULL UNIQUE REFERENCES scheduled_jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (tenant, name)
);

INSERT INTO job_names (tenant, name, job_id)
SELECT tenant, name, id FROM scheduled_jobs;

ALTER TABLE scheduled_jobs DROP CONSTRAINT scheduled_jobs_tenant_name_key;

-- Names of new jobs, once per statement (a bulk load of 100,000 jobs is one INSERT here). A
-- name taken already raises unique_violation on job_names_pkey, naming (tenant, name), and the
-- statement that inserted the job is rolled back with it.
CREATE FUNCTION pgpulse_job_names_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_names (tenant, name, job_id) SELECT tenant, name, id FROM added;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_names_insert AFTER INSERT ON scheduled_jobs
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pgpulse_job_names_insert();

-- Pulse never renames a job; a rename by hand moves its name along. Fires only for statements
-- that set tenant or name, so never for a claim or the end of an attempt.
CREATE FUNCTION pgpulse_job_names_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_names SET tenant = NEW.tenant, name = NEW.name WHERE job_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_names_rename AFTER UPDATE OF tenant, name ON scheduled_jobs
FOR EACH ROW WHEN ((OLD.tenant, OLD.name) IS DISTINCT FROM (NEW.tenant, NEW.name))
EXECUTE FUNCTION pgpulse_job_names_rename();
