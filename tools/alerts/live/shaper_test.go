package live

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The load: writers a little faster than writeback, and bursty, as a host's are. The shaper
// writes in bursts: whenever the host's dirty + writeback pages (what the exporter's throttle
// ratio counts) have come down to a little below a centre line, it writes them up to a little
// above it, by a different random amount each time; in between they come down only as fast as the
// throttled device writes back (1 MiB/s, 1/64 of the band a second). The centre line climbs
// slowly through the band from half-way below the background threshold's side to past the
// throttle point (band 1), where the kernel pauses the writes themselves (balance_dirty_pages())
// and holds the count. So the kernel shows a saw, sudden rises and slow falls of a different
// height every few seconds, with the other processes' writes on top.
//
// The writer starts the writeback of each chunk as soon as it has written it
// (sync_file_range SYNC_FILE_RANGE_WRITE, without waiting), as a RocketMQ flush thread forces the
// CommitLog: the chunk's pages go from dirty to under writeback at once, and their bios are
// submitted from the writer's cgroup, where a cgroup v2 throttle holds them (throttle_test.go).
// The count the kernel throttles on, dirty + writeback, is the same either way.
const (
	bandStart = 0.45   // the centre line when the load starts: one burst fills the band that far
	bandSlope = 0.0022 // per second: 140 KiB/s more than writeback (14 % faster); the second half of the band in 230 s
	bandHold  = 1.1    // the climb ends past the throttle point, where the kernel holds it
	swingMin  = 0.05   // each burst starts this much or more below the centre line ...
	swingMax  = 0.2    // ... and ends up to this much above it (and at most this much below)
	shapeSeed = 20     // the bursts are the same in every run
	chunk     = 64 << 10
	tickEvery = 100 * time.Millisecond
)

// centre returns the centre line in band units, d after the load starts.
func centre(d time.Duration) float64 {
	return min(bandStart+bandSlope*d.Seconds(), bandHold)
}

// dirtyState is the kernel's view from /proc/vmstat, in pages.
type dirtyState struct {
	dirty, writeback, threshold, background int64
}

// band is where dirty + writeback stand between the background threshold (0) and the throttle
// point (1), as instance:stall_vm_dirty_writeback_band:ratio computes it.
func (s dirtyState) band() float64 {
	freerun := float64(s.threshold+s.background) / 2
	return (float64(s.dirty+s.writeback) - float64(s.background)) / (freerun - float64(s.background))
}

func readDirty() (dirtyState, error) {
	var s dirtyState
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return s, err
	}
	found := 0
	for line := range bytes.Lines(b) {
		name, v, _ := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		var dst *int64
		switch string(name) {
		case "nr_dirty":
			dst = &s.dirty
		case "nr_writeback":
			dst = &s.writeback
		case "nr_dirty_threshold":
			dst = &s.threshold
		case "nr_dirty_background_threshold":
			dst = &s.background
		default:
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/vmstat %s: %w", name, err)
		}
		*dst = n
		found++
	}
	if found != 4 {
		return s, fmt.Errorf("/proc/vmstat: %d of nr_dirty, nr_writeback, nr_dirty_threshold, nr_dirty_background_threshold", found)
	}
	return s, nil
}

// shaper writes to the rig's device in bursts around centre.
type shaper struct {
	written atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	err     atomic.Pointer[error]
}

func startShaper(dev *os.File) *shaper {
	sh := &shaper{stop: make(chan struct{}), done: make(chan struct{})}
	page := int64(os.Getpagesize())
	rng := rand.New(rand.NewPCG(shapeSeed, 0))
	swing := func() float64 { return swingMin + (swingMax-swingMin)*rng.Float64() }
	go func() {
		defer close(sh.done)
		fail := func(err error) { sh.err.Store(&err) }
		fd := int(dev.Fd())
		data := bytes.Repeat([]byte("stall_exporter live writeback test "), chunk/35+1)[:chunk]
		start := time.Now()
		tick := time.NewTicker(tickEvery)
		defer tick.Stop()
		var off int64
		low := swing()
		for {
			select {
			case <-sh.stop:
				return
			case <-tick.C:
			}
			st, err := readDirty()
			if err != nil {
				fail(err)
				return
			}
			c := centre(time.Since(start))
			if st.band() > c-low {
				continue
			}
			need := int64((c+swing()-st.band())*float64(st.threshold-st.background)/2) * page
			low = swing()
			for need > 0 {
				select {
				case <-sh.stop:
					return
				default:
				}
				if off+chunk > writeCap {
					fail(fmt.Errorf("the writer reached its cap of %d MiB", writeCap>>20))
					return
				}
				if _, err := dev.WriteAt(data, off); err != nil {
					fail(err)
					return
				}
				if err := unix.SyncFileRange(fd, off, chunk, unix.SYNC_FILE_RANGE_WRITE); err != nil {
					fail(fmt.Errorf("sync_file_range: %w", err))
					return
				}
				off += chunk
				need -= chunk
				sh.written.Store(off)
			}
		}
	}()
	return sh
}

// halt stops the writer; a write paused by the kernel ends within its pause.
func (sh *shaper) halt() error {
	close(sh.stop)
	select {
	case <-sh.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the writer did not stop within 30 s")
	}
	if p := sh.err.Load(); p != nil {
		return *p
	}
	return nil
}
