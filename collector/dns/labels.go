package dns

// The bounded label values of the collector. A query type or response code
// outside these sets is counted as "other"; a name or address never becomes
// a label except a resolver address, bounded by --dns.max-resolvers.

const (
	qtA = iota
	qtAAAA
	qtPTR
	qtSRV
	qtTXT
	qtCNAME
	qtMX
	qtNS
	qtSOA
	qtOther
	numQTypes
)

var qtypeNames = [numQTypes]string{"A", "AAAA", "PTR", "SRV", "TXT", "CNAME", "MX", "NS", "SOA", "other"}

// qtypeCodes are the DNS TYPEs (RFC 1035 and successors) with a label of
// their own, by label index.
var qtypeCodes = [qtOther]uint16{qtA: 1, qtAAAA: 28, qtPTR: 12, qtSRV: 33, qtTXT: 16, qtCNAME: 5, qtMX: 15, qtNS: 2, qtSOA: 6}

// qtypeByCode is qtypeCodes inverted, for the TYPEs below 64.
var qtypeByCode = func() (m [64]uint8) {
	for i := range m {
		m[i] = qtOther
	}
	for idx, code := range qtypeCodes {
		m[code] = uint8(idx)
	}
	return m
}()

// qtypeIndex maps a DNS TYPE to its label index.
func qtypeIndex(t uint16) uint8 {
	if t < uint16(len(qtypeByCode)) {
		return qtypeByCode[t]
	}
	return qtOther
}

const (
	rcNoError = iota
	rcNXDomain
	rcServFail
	rcRefused
	rcOther
	numRCodes
)

var rcodeNames = [numRCodes]string{"NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED", "other"}

// rcodeIndex maps a header RCODE to its label index.
func rcodeIndex(rc uint8) uint8 {
	switch rc {
	case 0:
		return rcNoError
	case 3:
		return rcNXDomain
	case 2:
		return rcServFail
	case 5:
		return rcRefused
	}
	return rcOther
}
