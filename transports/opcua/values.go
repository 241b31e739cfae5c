package opcua

import (
	"fmt"

	"github.com/gopcua/opcua/ua"

	"github.com/leasebridge/leasebridge/transports/tagvalue"
)

// A write arrives as a bool, a Go number, a json.Number or a decimal
// string and is converted exactly (package tagvalue), or refused, into the
// node's data type.

// variantFor converts a written value (after inverting scale and offset)
// into a variant of the node's type.
func variantFor(t *tag, kind ua.TypeID, v any) (*ua.Variant, error) {
	if kind == ua.TypeIDString {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: a String node takes a string, got %T", ErrValue, v)
		}
		return ua.NewVariant(s)
	}
	if kind == ua.TypeIDBoolean {
		b, err := tagvalue.Bool(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		return ua.NewVariant(b)
	}
	n, err := tagvalue.ToNumber(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValue, err)
	}
	n = tagvalue.Unscale(n, t.scale, t.offset)
	var out any
	switch kind {
	case ua.TypeIDFloat:
		f, err := tagvalue.Float(n, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		out = float32(f)
	case ua.TypeIDDouble:
		f, err := tagvalue.Float(n, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		out = f
	case ua.TypeIDSByte, ua.TypeIDInt16, ua.TypeIDInt32, ua.TypeIDInt64:
		bits := map[ua.TypeID]uint{ua.TypeIDSByte: 8, ua.TypeIDInt16: 16, ua.TypeIDInt32: 32, ua.TypeIDInt64: 64}[kind]
		u, err := tagvalue.Integer(n, true, bits)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		switch kind {
		case ua.TypeIDSByte:
			out = int8(u)
		case ua.TypeIDInt16:
			out = int16(u)
		case ua.TypeIDInt32:
			out = int32(u)
		default:
			out = int64(u)
		}
	case ua.TypeIDByte, ua.TypeIDUint16, ua.TypeIDUint32, ua.TypeIDUint64:
		bits := map[ua.TypeID]uint{ua.TypeIDByte: 8, ua.TypeIDUint16: 16, ua.TypeIDUint32: 32, ua.TypeIDUint64: 64}[kind]
		u, err := tagvalue.Integer(n, false, bits)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrValue, err)
		}
		switch kind {
		case ua.TypeIDByte:
			out = uint8(u)
		case ua.TypeIDUint16:
			out = uint16(u)
		case ua.TypeIDUint32:
			out = uint32(u)
		default:
			out = u
		}
	default:
		return nil, fmt.Errorf("%w: writing a %s node is not supported", ErrValue, kind)
	}
	return ua.NewVariant(out)
}

// typeIDs maps configured types to OPC UA built-in types.
var typeIDs = map[string]ua.TypeID{
	"bool": ua.TypeIDBoolean, "int8": ua.TypeIDSByte, "uint8": ua.TypeIDByte,
	"int16": ua.TypeIDInt16, "uint16": ua.TypeIDUint16, "int32": ua.TypeIDInt32,
	"uint32": ua.TypeIDUint32, "int64": ua.TypeIDInt64, "uint64": ua.TypeIDUint64,
	"float32": ua.TypeIDFloat, "float64": ua.TypeIDDouble, "string": ua.TypeIDString,
}
