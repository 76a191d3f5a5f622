-- A reservation row now lives only while its request is in flight: settle and release delete it
-- (the usage record is the permanent trace), so the table stays small and has no state column.
DELETE FROM reservations WHERE state <> 'pending';
DROP INDEX reservations_pending;
ALTER TABLE reservations DROP COLUMN state;
-- A hold also records its endpoint and model, so one the sweeper releases says what it was for.
ALTER TABLE reservations
    ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'unknown',
    ADD COLUMN model TEXT NOT NULL DEFAULT 'unknown';
