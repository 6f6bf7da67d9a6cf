-- A migration may stop the nodes of older releases (those that cannot run on its schema): a file
-- whose header carries the line `-- pgpulse: nodes before this migration must stop` is recorded
-- here with breaks_older_nodes true (the runner sets it after applying the file:
-- pgpulse.migrations). A node or command of any release from this one on reads the highest such
-- version before it runs, and refuses a database where it is beyond the newest migration it knows.
-- A newer schema without a marked migration beyond it is still accepted: rolling deploys run nodes
-- of two releases at once. Nodes of the releases before this one do not read the column: no marked
-- migration can stop them (docs/upgrading.md). No migration before 0019 carries the marker.
-- A constant default: no table rewrite.
ALTER TABLE pgpulse_migrations ADD COLUMN breaks_older_nodes boolean NOT NULL DEFAULT false;
