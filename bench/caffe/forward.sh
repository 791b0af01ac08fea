#!/usr/bin/env bash
# forward.sh — Caffe nets with weights written by Google's protobuf (python3-protobuf, caffe.proto
# compiled by protoc) run forward by shoal and by PyTorch (tests/nn/caffe_torch.py, double) on
# the same input: the largest differences (within 1e-4 passes) for LeNet, the whole CaffeNet
# (227x227, 61M weights, a 233 MB .caffemodel) and the net of every other mapped layer.
#   bench/caffe/forward.sh                      # lenet caffenet zoo
#   NETS="lenet caffenet_small" bench/caffe/forward.sh   # a quick check
set -euo pipefail
cd "$(dirname "$0")/../.."
NETS=${NETS:-"lenet caffenet zoo"}
BUILD=${BUILD:-build}
make -s -j2 BUILD="$BUILD" "$BUILD/libshoal.a" >&2
tmp=$(mktemp -d /tmp/shoal_caffe_fwd_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -I"$BUILD/gen" bench/caffe/forward_check.c "$BUILD/libshoal.a" \
   -pthread -lz -ldl -lm -lrt -lprotobuf-c -o "$tmp/forward_check"
fail=0
for net in $NETS; do
    /usr/bin/python3 tests/nn/caffe_torch.py net "$net" "$tmp"
    env -u OPENBLAS_CORETYPE SHOAL_LOG=error "$tmp/forward_check" "$tmp/$net.prototxt" "$tmp/$net.caffemodel" \
        "$tmp/input.bin" "$tmp/expected.bin" || fail=1
done
exit $fail
