package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/flashgate/flashgate/draw"
)

// drawUsage is the draw command's usage line.
const drawUsage = "usage: flashgate draw verify FILE"

// runDraw runs "flashgate draw verify FILE": it reads a draw's entries
// file, checks its seed against the commitment and redoes the draw, and
// prints the winners per variant. It takes no flags (and reads no
// environment): anyone can run it with the published file alone.
func runDraw(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stderr, drawUsage)
		fmt.Fprintln(stderr, "  verify FILE  check a draw's entries file: the seed hashes to its commitment, and every result is the draw's")
		return nil
	}
	if len(args) != 2 || args[0] != "verify" {
		return &usageError{"draw: " + drawUsage}
	}
	in, err := os.Open(args[1])
	if err != nil {
		return fmt.Errorf("draw verify: %w", err)
	}
	defer in.Close()
	f, err := draw.Read(in)
	if err != nil {
		return fmt.Errorf("draw verify %s: %w", args[1], err)
	}
	won, err := draw.Verify(f)
	if err != nil {
		return fmt.Errorf("draw verify %s: %w", args[1], err)
	}
	entered := map[string]int{}
	for _, e := range f.Entries {
		entered[e.Variant]++
	}
	fmt.Fprintf(stdout, "draw of sale %s: verified\n", f.Sale)
	fmt.Fprintf(stdout, "  seed         %x\n", f.Seed)
	fmt.Fprintf(stdout, "  commitment   %s (the seed's SHA-256)\n", f.SeedSHA256)
	fmt.Fprintf(stdout, "  entries      %d\n", len(f.Entries))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  variant\tunits\tentries\twinners\t")
	variants := make([]string, 0, len(f.Stock))
	for v := range f.Stock {
		variants = append(variants, v)
	}
	slices.Sort(variants)
	total := 0
	for _, v := range variants {
		name := v
		if name == "" {
			name = "(one stock)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t\n", name, f.Stock[v], entered[v], len(won[v]))
		total += len(won[v])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  every published result is the draw's: %d won, %d lost\n", total, len(f.Entries)-total)
	return nil
}
