"""The payload of a run's ``NOTIFY``: written once for every engine's feed
(``storage.feed_payload``)."""

from storage.feed_payload import MAX_PAYLOAD_BYTES, decode_payload, encode_payload

__all__ = ["MAX_PAYLOAD_BYTES", "decode_payload", "encode_payload"]
