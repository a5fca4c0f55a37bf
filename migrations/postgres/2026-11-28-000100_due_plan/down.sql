DROP FUNCTION a2a_owned_due_deliveries(BIGINT, BIGINT, TEXT);
DROP FUNCTION a2a_due_deliveries(BIGINT, BIGINT);
