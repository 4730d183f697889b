package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteSVG draws the result's time series as a standalone SVG: engines per
// role and offered prefill / decode demand (engine equivalents, left axis)
// and SLO attainment of the requests arriving in each interval (right
// axis, 0–100 %). Hand-written, no dependencies.
func WriteSVG(w io.Writer, res *Result) error {
	const W, H, ml, mr, mt, mb = 960.0, 420.0, 60.0, 60.0, 40.0, 50.0
	pw, ph := W-ml-mr, H-mt-mb
	pts := res.Series
	if len(pts) == 0 {
		return fmt.Errorf("sim: svg: empty series: %w", ErrBadConfig)
	}
	tMax := pts[len(pts)-1].TS
	if tMax <= 0 {
		tMax = 1
	}
	yMax := float64(res.Engines)
	for _, p := range pts {
		yMax = math.Max(yMax, math.Max(p.PrefillDemand, p.DecodeDemand))
	}
	// demand spikes above twice the cluster are clipped so that the engine
	// lines stay readable
	yMax = math.Ceil(math.Min(yMax, 2*float64(res.Engines))/4) * 4
	x := func(t float64) float64 { return ml + t/tMax*pw }
	y := func(v float64) float64 { return mt + ph - math.Min(v, yMax)/yMax*ph }
	ya := func(a float64) float64 { return mt + ph - a*ph }
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%.0f" y="20" font-size="14">%s — %d engines, SLO attainment %.1f%%, moves %d</text>`+"\n",
		ml, xmlEscape(res.Policy), res.Engines, 100*res.SLOAttainment, res.Moves)
	// axes and grid
	for i := 0; i <= 4; i++ {
		v := yMax * float64(i) / 4
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", ml, y(v), ml+pw, y(v))
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", ml-6, y(v)+4, v)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%d%%</text>`+"\n", ml+pw+6, ya(float64(i)/4)+4, 25*i)
	}
	for i := 0; i <= 6; i++ {
		t := tMax * float64(i) / 6
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0fs</text>`+"\n", x(t), mt+ph+18, t)
	}
	fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", ml, mt, pw, ph)
	fmt.Fprintf(bw, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">engines / engine-equivalents</text>`+"\n", mt+ph/2, mt+ph/2)
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" transform="rotate(90 %.1f %.1f)" text-anchor="middle">attainment</text>`+"\n", W-12, mt+ph/2, W-12, mt+ph/2)
	series := []struct {
		name, color, dash string
		val               func(Point) float64
		att               bool
	}{
		{"prefill engines", "#1f77b4", "", func(p Point) float64 { return p.PrefillEngines }, false},
		{"decode engines", "#d62728", "", func(p Point) float64 { return p.DecodeEngines }, false},
		{"offered prefill demand", "#1f77b4", "4 3", func(p Point) float64 { return p.PrefillDemand }, false},
		{"offered decode demand", "#d62728", "4 3", func(p Point) float64 { return p.DecodeDemand }, false},
		{"SLO attainment", "#2ca02c", "", func(p Point) float64 { return p.Attainment }, true},
	}
	for k, s := range series {
		var sb strings.Builder
		for i, p := range pts {
			yy := y(s.val(p))
			if s.att {
				yy = ya(s.val(p))
			}
			if i == 0 {
				fmt.Fprintf(&sb, "M%.1f %.1f", x(p.TS), yy)
			} else {
				fmt.Fprintf(&sb, " L%.1f %.1f", x(p.TS), yy)
			}
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(bw, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>`+"\n", sb.String(), s.color, dash)
		lx := ml + float64(k)*170
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`, lx, H-12, lx+20, H-12, s.color, dash)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, H-8, s.name)
	}
	fmt.Fprintln(bw, `</svg>`)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("sim: svg: %w", err)
	}
	return nil
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
