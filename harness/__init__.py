"""k3-kernel-harness: agent-written CuTe DSL kernels for the Kimi K3 decode path,
promoted only through the fast-track gates."""
__version__ = "0.2.0"  # 0.2.0: timed calls are separated (harness/toolchain/timing.py); evidence records carry it
