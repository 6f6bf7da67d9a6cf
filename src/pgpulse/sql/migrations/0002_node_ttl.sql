-- Pulse schema, version 2: each node records its time-to-live.
--
-- A node is dead to its peers once its heartbeat is older than their node_ttl (about three
-- heartbeats, from `node run --heartbeat`); its shards then move. `pgpulse status` and the
-- API judge each node by the time-to-live it registered with, so they call a node lost at the
-- moment its peers stop counting it, and the shards of the live nodes add up. NULL (a node
-- registered before this version): the reader's own default applies.
ALTER TABLE pgpulse_nodes ADD COLUMN ttl double precision CHECK (ttl > 0);
