package etcdstore

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// sendCodec is gRPC's proto codec, except that it marshals every request
// into a slice of its own rather than a buffer of gRPC's pool. The pool's
// tiers jump from 32 KiB to 1 MiB, and a batch of renewals is a Txn of up
// to 127 rows, about 50 KB: each Txn in flight would take a 1 MiB buffer,
// which the pool then keeps, about 8 MB for an owner of 1,000 sessions
// whose Txns go out together. A slice of its own is freed by the next
// collection. Replies are decoded by gRPC's own codec.
type sendCodec struct{}

// protoCodec is gRPC's proto codec, which sendCodec decodes with.
var protoCodec = encoding.GetCodecV2("proto")

// Marshal encodes v, a request, into a slice of its own.
func (sendCodec) Marshal(v any) (mem.BufferSlice, error) {
	var m proto.Message
	switch v := v.(type) {
	case protoadapt.MessageV1:
		m = protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		m = v
	default:
		return nil, fmt.Errorf("etcdstore: cannot encode %T: not a protocol buffer message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: encode %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes a reply with gRPC's proto codec.
func (sendCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec.Unmarshal(data, v)
}

// Name is the proto codec's, so that requests keep their content type.
func (sendCodec) Name() string { return protoCodec.Name() }
