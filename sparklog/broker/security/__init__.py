"""Authentication of the broker's connections: SASL (PLAIN, SCRAM) over a SASL listener."""
