"""C4P: candidate routes, planning instances, solvers, bounds, the validator and summaries.

Pure: values in, values out. No web, database or SNMP library and no `controller.settings`
(import-linter checks it); ortools, networkx and numpy are the only libraries used.
"""
