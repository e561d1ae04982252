"""Re-export: key scrubbing lives in harness.secrets (the toolchain uses it too)."""
from ..secrets import KEY_ENV_VARS, REDACTED, key_values, scrub, scrub_obj  # noqa: F401
