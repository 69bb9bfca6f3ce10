package abi

import "testing"

// TestRecordValueNull: flag bit 2 (0.5) survives encoding and decoding apart from the empty value
// and the other flags, on both decoding paths, and 0.5 is the version a 0.5 guest may declare.
func TestRecordValueNull(t *testing.T) {
	if FlagValueNull != 4 || EmitNullValue != -1 {
		t.Fatalf("FlagValueNull = %d, EmitNullValue = %d: ABI.md §6.2 and §4.5 say bit 2 and -1", FlagValueNull, EmitNullValue)
	}
	if !Compatible(0x0000_0005) || Compatible(0x0000_0006) {
		t.Fatalf("Compatible(0.5) = %v, Compatible(0.6) = %v; want true, false", Compatible(5), Compatible(6))
	}
	recs := []Record{
		{Flags: FlagValueNull, Key: []byte("k"), Value: nil, Timestamp: -1},
		{Flags: 0, Key: []byte("k"), Value: []byte{}, Timestamp: -1},
		{Flags: FlagValueNull | FlagKeyNull | FlagLate, Key: []byte(NullKey), Timestamp: 5,
			Headers: []Header{{Name: []byte("h"), Value: []byte("v")}}}, // the general path
	}
	b := AppendBatchHeader(nil, len(recs))
	for i := range recs {
		b = AppendRecord(b, &recs[i])
	}
	got, err := DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.Flags != recs[i].Flags || len(r.Value) != 0 {
			t.Errorf("record %d: flags %#x, value %q; want flags %#x and an empty value", i, r.Flags, r.Value, recs[i].Flags)
		}
	}
	if got[0].Flags&FlagValueNull == 0 || got[1].Flags&FlagValueNull != 0 {
		t.Errorf("the null value and the empty value are not told apart: flags %#x and %#x", got[0].Flags, got[1].Flags)
	}
}
