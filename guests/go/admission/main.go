// Sample admission policy in Go: the same as the Rust sample
// (guests/admission), passing the same case file; admission.go is also
// the module `berth policy new --lang go --decisions admission` makes.
//
// main never runs: the module is a library (go build -buildmode=c-shared).
package main

func main() {}
