package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
)

// colors gives every known proxy a fixed colour; others get grey.
var colors = map[string]string{
	"rustle":    "#d9541e",
	"squid":     "#3b6ea5",
	"tinyproxy": "#5f9a32",
	"dante":     "#8e5ba8",
	NoProxy:     "#9a9a9a",
}

func colorOf(proxy string) string {
	if c, ok := colors[proxy]; ok {
		return c
	}
	return "#666666"
}

// ThroughputSVG writes a bar chart of the rows whose Chart is "throughput":
// one panel per row with its own scale, one bar per proxy with a figure.
func ThroughputSVG(w io.Writer, c Campaign) error {
	figs := Figures(c)
	const (
		width  = 760
		labelW = 110
		barMax = 480
		barH   = 16
		gap    = 5
		titleH = 22
		padB   = 14
	)
	type panel struct {
		row  Row
		bars []Proxy
	}
	var panels []panel
	height := 40
	for _, r := range c.Rows {
		if r.Chart != "throughput" {
			continue
		}
		p := panel{row: r}
		for _, px := range c.Proxies {
			if figs[r.ID][px.Name].OK {
				p.bars = append(p.bars, px)
			}
		}
		panels = append(panels, p)
		height += titleH + max(len(p.bars), 1)*(barH+gap) + padB
	}
	bw := bufio.NewWriter(w)
	svgOpen(bw, width, height)
	fmt.Fprintf(bw, `<text x="10" y="24" font-size="16" font-weight="bold">Throughput by test and proxy (each panel has its own scale)</text>`+"\n")
	y := 40
	for _, p := range panels {
		fmt.Fprintf(bw, `<text x="10" y="%d" font-size="13" font-weight="bold">%s (%s)</text>`+"\n", y+15, esc(p.row.Title), esc(p.row.Unit))
		y += titleH
		top := 0.0
		for _, px := range p.bars {
			top = math.Max(top, figs[p.row.ID][px.Name].Value)
		}
		if len(p.bars) == 0 {
			fmt.Fprintf(bw, `<text x="%d" y="%d" font-size="12" fill="#666">no clean figure</text>`+"\n", labelW, y+12)
			y += barH + gap
		}
		for _, px := range p.bars {
			cell := figs[p.row.ID][px.Name]
			bl := 1.0
			if top > 0 {
				bl = math.Max(1, barMax*cell.Value/top)
			}
			fmt.Fprintf(bw, `<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>`+"\n", labelW-6, y+12, esc(px.Label))
			fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y, bl, barH, colorOf(px.Name))
			fmt.Fprintf(bw, `<text x="%.1f" y="%d" font-size="12">%s</text>`+"\n", float64(labelW)+bl+5, y+12, esc(cell.Text))
			y += barH + gap
		}
		y += padB
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// MemorySVG writes a line chart of the rows whose Chart is "memory": RSS in
// MB against the number of open tunnels, one line per proxy.
func MemorySVG(w io.Writer, c Campaign) error {
	figs := Figures(c)
	const (
		width, height          = 760, 420
		left, right, top, bott = 70, 150, 40, 50
	)
	type pt struct{ x, y float64 }
	series := map[string][]pt{}
	maxX, maxY := 1.0, 1.0
	for _, r := range c.Rows {
		if r.Chart != "memory" {
			continue
		}
		for _, p := range c.Proxies {
			cell := figs[r.ID][p.Name]
			if !cell.OK {
				continue
			}
			series[p.Name] = append(series[p.Name], pt{float64(r.Tunnels), cell.Value})
			maxX = math.Max(maxX, float64(r.Tunnels))
			maxY = math.Max(maxY, cell.Value)
		}
	}
	maxX, maxY = niceCeil(maxX), niceCeil(maxY)
	pw, ph := float64(width-left-right), float64(height-top-bott)
	sx := func(x float64) float64 { return left + pw*x/maxX }
	sy := func(y float64) float64 { return top + ph - ph*y/maxY }

	bw := bufio.NewWriter(w)
	svgOpen(bw, width, height)
	fmt.Fprintf(bw, `<text x="10" y="24" font-size="16" font-weight="bold">Proxy memory (VmRSS, MB) against open tunnels</text>`+"\n")
	for i := 0; i <= 5; i++ {
		xv, yv := maxX*float64(i)/5, maxY*float64(i)/5
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", sx(0), sy(yv), sx(maxX), sy(yv))
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", sx(0)-6, sy(yv)+4, FormatValue(yv, 0))
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", sx(xv), sy(0)+16, FormatValue(xv, 0))
	}
	fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", sx(0), sy(0), sx(maxX), sy(0))
	fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", sx(0), sy(0), sx(0), sy(maxY))
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle">open tunnels</text>`+"\n", sx(maxX/2), height-12)
	ly := top + 10
	for _, p := range c.Proxies {
		pts := series[p.Name]
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b pt) int { return int(a.x - b.x) })
		col := colorOf(p.Name)
		bw.WriteString(`<polyline fill="none" stroke-width="2" stroke="` + col + `" points="`)
		for i, q := range pts {
			if i > 0 {
				bw.WriteString(" ")
			}
			fmt.Fprintf(bw, "%.1f,%.1f", sx(q.x), sy(q.y))
		}
		bw.WriteString(`"/>` + "\n")
		for _, q := range pts {
			fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", sx(q.x), sy(q.y), col)
		}
		last := pts[len(pts)-1]
		fmt.Fprintf(bw, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", width-right+15, ly-10, col)
		fmt.Fprintf(bw, `<text x="%d" y="%d" font-size="12">%s (%s MB)</text>`+"\n", width-right+32, ly, esc(p.Label), FormatValue(last.y, 0))
		ly += 20
	}
	if len(series) == 0 {
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" font-size="13" text-anchor="middle" fill="#666">no clean figure</text>`+"\n", sx(maxX/2), sy(maxY/2))
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// svgOpen writes the svg element and a white background.
func svgOpen(w io.Writer, width, height int) {
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// esc escapes text for SVG.
func esc(s string) string { return html.EscapeString(s) }
