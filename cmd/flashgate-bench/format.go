package main

import (
	"fmt"
	"strings"
	"time"
)

func num(f float64) string {
	neg := f < 0
	if neg {
		f = -f
	}
	s := fmt.Sprintf("%.0f", f)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func ms(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func rateCell(s stat) string {
	return fmt.Sprintf("%s (%s–%s)", num(s.Med), num(s.Min), num(s.Max))
}

func ratioCell(s stat) string {
	return fmt.Sprintf("**%.2f** (%.2f–%.2f)", s.Med, s.Min, s.Max)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func joinInts(v []int64) string {
	var s []string
	for _, n := range v {
		s = append(s, num(float64(n)))
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
