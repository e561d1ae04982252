# Source on the lent GPU machine, from the checkout's root (bring .device and .whl):
#   source scripts/gpu/setup.sh
# Sets up the staged CuTe DSL (.device/cutedsl), installs the wheels the GPU image lacks
# (.whl: pydantic, gitpython, llguidance) into /tmp/site, and puts the checkout on PYTHONPATH
# so `python3 -m harness.cli ...` runs the harness there.
source .device/cutedsl/setup.sh
if [ -d .whl ] && [ ! -f /tmp/site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.ok
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
harness() { python3 -m harness.cli "$@"; }
