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

// qtypeIndex maps a DNS TYPE (RFC 1035 and successors) to its label index.
func qtypeIndex(t uint16) uint8 {
	switch t {
	case 1:
		return qtA
	case 28:
		return qtAAAA
	case 12:
		return qtPTR
	case 33:
		return qtSRV
	case 16:
		return qtTXT
	case 5:
		return qtCNAME
	case 15:
		return qtMX
	case 2:
		return qtNS
	case 6:
		return qtSOA
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
