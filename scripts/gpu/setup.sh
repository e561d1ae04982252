# Source on the lent GPU machine, from the checkout's root (bring .device and .whl):
#   source scripts/gpu/setup.sh
# Sets up the staged CuTe DSL (.device/cutedsl), unpacks the packages the GPU image lacks
# (.whl/site.tar.xz from scripts/gpu/prepare-whl: llguidance; older stages: *.whl) into
# /tmp/site, and puts the checkout on PYTHONPATH so `python3 -m harness.cli ...` runs there.
source .device/cutedsl/setup.sh
if [ -d .whl ] && [ ! -f /tmp/site/.ok ]; then
  mkdir -p /tmp/site
  for t in .whl/*.tar.xz; do [ -f "$t" ] && xz -dc "$t" | tar xf - -C /tmp/site; done
  for w in .whl/*.whl; do
    [ -f "$w" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$w"
  done
  touch /tmp/site/.ok
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
harness() { python3 -m harness.cli "$@"; }
