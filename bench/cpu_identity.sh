# Sourced by the CPU benches: sets `cpu` (the model name) and `isa` (the vector extensions tfm
# chooses its paths from, as /proc/cpuinfo lists them), printed beside every figure.
cpu=$(lscpu | sed -n 's/^Model name: *//p')
isa=$(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')
