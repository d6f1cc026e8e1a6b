-- mcpsub's own tables on PostgreSQL (the counterpart of system.sql): not written yet.
SELECT 1;
