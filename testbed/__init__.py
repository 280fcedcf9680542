"""c4's testbed: an emulated leaf-spine fabric in Linux network namespaces (the kernel forwards
and hashes), Debian's snmpd on every switch, and an NCCL-like workload driving the c4 shim.

Imports at most `controller.domain` and the pure naming helpers of `controller.topology`
(checked by import-linter); never the controller's services, store or API. See README.md
beside this file for the address plan and naming.
"""

from testbed.fabric import Testbed, TestbedError
from testbed.plan import FabricSpec

__all__ = ["FabricSpec", "Testbed", "TestbedError"]
