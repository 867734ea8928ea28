#!/usr/bin/env bash
# Two nodes on one machine: two network namespaces joined by a veth pair, one tfmrun in each
# (--nnodes 2, 2 processes per node, the master on node 0). Prints each node's output prefixed
# with [nodeN]; exits non-zero if either node does, and 77 when namespaces cannot be made here.
#   two_nodes.sh BUILD_DIR PORT PROGRAM [ARGS...]
set -u
build=$1 port=$2
shift 2
id=tfm$$
a=${id}a b=${id}b
ip netns add "$a" 2>/dev/null || exit 77
trap 'ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null' EXIT
ip netns add "$b" && ip link add "${id}x" type veth peer name "${id}y" || exit 77
ip link set "${id}x" netns "$a" && ip link set "${id}y" netns "$b" || exit 77
ip -n "$a" addr add 10.231.0.1/24 dev "${id}x" && ip -n "$b" addr add 10.231.0.2/24 dev "${id}y"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "${id}x" up && ip -n "$b" link set "${id}y" up || exit 77

launch=(--nnodes 2 --nproc_per_node 2 --master_addr 10.231.0.1 --master_port "$port")
logs=$(mktemp -d)
ip netns exec "$a" "$build/tfmrun" "${launch[@]}" --node_rank 0 "$@" > "$logs/0" 2>&1 &
node0=$!
ip netns exec "$b" "$build/tfmrun" "${launch[@]}" --node_rank 1 "$@" > "$logs/1" 2>&1
status1=$?
wait "$node0"
status0=$?
sed 's/^/[node0] /' "$logs/0"
sed 's/^/[node1] /' "$logs/1"
rm -rf "$logs"
[ "$status0" -eq 0 ] && [ "$status1" -eq 0 ]
