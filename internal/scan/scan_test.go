package scan

import (
	"strconv"
	"testing"
)

func TestField(t *testing.T) {
	b := []byte("  8\t0 sda 1\r\n2  ")
	var got []string
	for f := Field(&b); len(f) > 0; f = Field(&b) {
		got = append(got, string(f))
	}
	if want := "[8 0 sda 1 2]"; toString(got) != want {
		t.Errorf("fields %v, want %s", got, want)
	}
}

func toString(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

func TestUint(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"0", true}, {"18446744073709551615", true}, {"18446744073709551616", false},
		{"", false}, {"-1", false}, {"+1", false}, {"0x10", false}, {"1 ", false}, {"99999999999999999999", false},
	} {
		v, ok := Uint([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%q: ok %v, want %v", c.in, ok, c.ok)
		}
		if ok {
			if want, _ := strconv.ParseUint(c.in, 10, 64); v != want {
				t.Errorf("%q = %d", c.in, v)
			}
		}
	}
}

func FuzzUint(f *testing.F) {
	f.Add("123")
	f.Add("000000000000000000000")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := Uint([]byte(s))
		want, err := strconv.ParseUint(s, 10, 64)
		// Uint refuses more than 20 characters: the kernel never pads.
		if ok != (err == nil && len(s) <= 20) || ok && v != want {
			t.Errorf("Uint(%q) = %d, %v; strconv says %d, %v", s, v, ok, want, err)
		}
	})
}

func TestUintString(t *testing.T) {
	for _, in := range []string{"0", "42", "18446744073709551615", "18446744073709551616", "", "-1", "4 2"} {
		v, ok := Uint(in)
		bv, bok := Uint([]byte(in))
		if v != bv || ok != bok {
			t.Errorf("Uint(%q) = %d, %v as a string but %d, %v as bytes", in, v, ok, bv, bok)
		}
	}
	if v, ok := Uint("18446744073709551615"); !ok || v != 1<<64-1 {
		t.Errorf("max uint64 = %d, %v", v, ok)
	}
}

func TestLine(t *testing.T) {
	data := []byte("a b\n\nc")
	var got []string
	for len(data) > 0 {
		var l []byte
		l, data = Line(data)
		got = append(got, string(l))
	}
	if want := "[a b  c]"; toString(got) != want {
		t.Errorf("lines %q, want %s", got, want)
	}
	if l, rest := Line([]byte("x\n")); string(l) != "x" || len(rest) != 0 {
		t.Errorf(`Line("x\n") = %q, %q`, l, rest)
	}
}
