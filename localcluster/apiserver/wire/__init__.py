"""Request bodies as clients send them (pure): ``decoding`` (JSON and YAML bodies, the
decoder's limits, fieldValidation: unknown and duplicate fields, wrong types, as the first
step of a write) and ``protobuf`` (the protobuf bodies kubectl's imperative commands send).
"""
