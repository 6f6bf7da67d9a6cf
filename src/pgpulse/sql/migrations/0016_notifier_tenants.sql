-- A notifier belongs to a tenant (tenant set) or to the cluster (tenant NULL: the admin's, such
-- as the organisation's e-mail or Slack). A tenant's job rules may name the tenant's own
-- notifiers and those an admin shared with it (shared_with), so a tenant's alerts never reach
-- the organisation's channels unless an admin shared them.
ALTER TABLE pgpulse_notifiers
    ADD COLUMN tenant text,
    ADD COLUMN shared_with text[] DEFAULT '{}'::text[] NOT NULL;

-- What works keeps working: a notifier is shared with each tenant whose jobs' rules name it
-- already (an app declares its rules again at every start; without this, a tenant's app that
-- routes to a cluster notifier would be refused after the upgrade). An admin withdraws a share
-- with `pgpulse notifier unshare`.
UPDATE pgpulse_notifiers n
SET shared_with = used.tenants
FROM (
    SELECT wanted.id, array_agg(DISTINCT j.tenant ORDER BY j.tenant) AS tenants
    FROM pgpulse_alert_rules r
    JOIN pgpulse_jobs j ON j.id = r.job_id
    CROSS JOIN LATERAL unnest(r.notifiers) AS wanted (id)
    GROUP BY wanted.id
) used
WHERE n.id = used.id;
