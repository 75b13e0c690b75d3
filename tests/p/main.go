// p: a Berth policy module serving naming, placement, retry.
//
// Each decision's file registers its function in init; main never runs
// (the module is a library: go build -buildmode=c-shared).
package main

func main() {}
