#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts a CPU agent and a
# router on localhost, makes an example axpy call that updates y in place
# ({1: 0} aliasing), then runs a jax.jit training loop whose update step
# runs on the agent (examples/jax_training_step.py), and a small MLP whose
# optimizer step runs on a Python agent that is killed and restarted
# mid-run (examples/jax_mlp.py). The processes stop when the script ends,
# unless FARCALL_KEEP_RUNNING=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
echo "== building (first build takes several minutes on 2 cores)"
bash scripts/build.sh farcall-agent farcall-router farcall _farcall

run_dir=$(mktemp -d)
pids=()
cleanup() {
  if [ "${FARCALL_KEEP_RUNNING:-0}" != 1 ]; then
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
  fi
  rm -rf "$run_dir"
}
trap cleanup EXIT

# Starts a server on port 0 and sets PORT to the port it bound. The server
# writes the port to a FIFO once it serves, so nothing polls or sleeps.
start() {
  local name=$1; shift
  local fifo="$run_dir/$name.ready"
  mkfifo "$fifo"
  "$@" --ready_fd=3 3>"$fifo" >"$run_dir/$name.log" 2>&1 &
  pids+=($!)
  PORT=""
  read -r PORT <"$fifo" || true
  if [ -z "$PORT" ]; then
    echo "$name failed to start:" >&2
    cat "$run_dir/$name.log" >&2
    exit 1
  fi
}

start agent build/device_agents/farcall-agent --platform=cpu --listen=127.0.0.1:0
agent_port=$PORT
echo "== farcall-agent (cpu) listening on 127.0.0.1:$agent_port"
start router build/server/farcall-router --listen=127.0.0.1:0 --agents=127.0.0.1:$agent_port
router_port=$PORT
echo "== farcall-router listening on 127.0.0.1:$router_port"
echo
build/client/farcall agents --target=127.0.0.1:$router_port
echo
echo '== y = alpha * x + y, with y updated in place: input_output_aliases={1: 0}'
build/client/farcall call axpy 'float32[8]:iota' 'float32[8]:ones' \
  --results='float32[8]' --aliases=1:0 --attr=alpha=2.0 \
  --target=127.0.0.1:$router_port
echo
echo '== from Python: a jax.jit training loop whose SGD update runs on the agent'
.venv/bin/python examples/jax_training_step.py --target=127.0.0.1:$router_port
echo
echo '== a jitted MLP whose optimizer step (a JAX-style callback) runs on a Python agent,'
echo '   which is killed and restarted halfway: the step waits for it and goes on'
.venv/bin/python examples/jax_mlp.py
if [ "${FARCALL_KEEP_RUNNING:-0}" = 1 ]; then
  echo "router: 127.0.0.1:$router_port  agent: 127.0.0.1:$agent_port (still running)"
fi
