"""Switch agents: SNMP pollers and vendor OID profiles that post raw counters to the controller."""
