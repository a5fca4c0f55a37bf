-- Refuses the transaction it runs in, with SQLSTATE `code`, unless `ok` is true.
--
-- A commit sends BEGIN, its statements and COMMIT in one round trip, so the checks a
-- batch depends on cannot wait for the client to read their answers: a moved fencing
-- token (A2F01), a thread another node owns (A2F02) and an idempotency key claimed
-- within its window (A2D01) fail the transaction themselves, and the COMMIT after them
-- rolls it back.
CREATE FUNCTION a2a_require(ok boolean, code text, message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    END IF;
END
$$;
