"""Publishes KV-cache events the way vLLM's ZmqEventPublisher does, for the
interop test in pyzmq_test.go: libzmq on the wire, msgspec for the payload.

usage: vllm_publisher.py ENDPOINT (map|array) [connect | replay=ENDPOINT]

The event structs follow vllm/distributed/kv_events.py: "map" is vLLM 0.32's
encoding (tagged structs as maps), "array" the older array_like one. An XPUB
socket stands in for vLLM's PUB (the same frames; READY names XPUB) so that
the script can wait for the subscription instead of sleeping.
"""
import sys

import msgspec
import zmq

endpoint, encoding = sys.argv[1], sys.argv[2]
connect = sys.argv[3:] == ["connect"]  # vLLM connects when its endpoint names a host
replay = sys.argv[3][len("replay="):] if sys.argv[3:] and sys.argv[3].startswith("replay=") else None
array_like = encoding == "array"


class EventBatch(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list
    parent_block_hash: object
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None
    extra_keys: list | None = None
    group_idx: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


def h(i):
    # Integer hashes in one encoding, bytes in the other: vLLM has sent both.
    return i if encoding == "map" else i.to_bytes(32, "big")


batches = [
    [BlockStored(block_hashes=[h(11), h(12)], parent_block_hash=None, token_ids=list(range(32)),
                 block_size=16, lora_id=None, medium="GPU")],
    [BlockStored(block_hashes=[h(13)], parent_block_hash=h(12), token_ids=list(range(32, 48)),
                 block_size=16, lora_id=None, medium="GPU"),
     BlockStored(block_hashes=[h(99)], parent_block_hash=None, token_ids=list(range(16)),
                 block_size=16, lora_id=None, medium="CPU")],
    [BlockRemoved(block_hashes=[h(13)], medium="GPU")],
]

ctx = zmq.Context.instance()
router = None
if replay:
    router = ctx.socket(zmq.ROUTER)
    router.bind(replay)
pub = ctx.socket(zmq.XPUB)
if connect:
    pub.connect(endpoint)
else:
    pub.bind(endpoint)
print("ready", flush=True)
sub = pub.recv()  # b"\x01" + topic
assert sub[:1] == b"\x01", sub
enc = msgspec.msgpack.Encoder()
buffer = []
for seq, events in enumerate(batches):
    payload = enc.encode(EventBatch(ts=1.0, events=events, data_parallel_rank=0))
    buffer.append((seq, payload))
    if replay and seq == 1:
        continue  # lost on the way: only the replay socket has it
    pub.send_multipart((b"kv-events", seq.to_bytes(8, "big"), payload))
if router is not None:
    # As vLLM's _service_replay: [identity, empty, start] in, each buffered
    # batch from start on out, then the end marker.
    assert router.poll(10000), "no replay request"
    client_id, _, start = router.recv_multipart()
    for seq, payload in buffer:
        if seq >= int.from_bytes(start, "big"):
            router.send_multipart((client_id, b"", seq.to_bytes(8, "big"), payload))
    router.send_multipart((client_id, b"", (-1).to_bytes(8, "big", signed=True), b""))
    router.close(linger=5000)
pub.close(linger=5000)
ctx.term()
