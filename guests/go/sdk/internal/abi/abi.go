//go:build wasip1

// Package abi is the component model's canonical ABI for Berth's
// contract, by hand: reading the arguments Berth lowered into memory and
// writing the answers it lifts. Memory handed to Berth comes from an arena
// the garbage collector sees, and is released after Berth has read the
// answer (the exports' post-return functions call Reset).
package abi

import "unsafe"

// arena keeps every block handed out since the last Reset reachable, so the
// collector neither frees nor reuses memory Berth writes or reads. Its room
// is made at start-up, so a decision does not grow it from nothing (each
// decision starts from the start-up's memory, where it is empty).
var arena = make([][]uint64, 0, 64)

// warm holds one object of each size up to 1 KiB, with and without
// pointers, allocated while the module initialises: the allocator then has
// a span of most small size classes at hand in the snapshot every decision
// starts from, instead of taking one from the heap in every decision (a
// naming decision wrote 85 KiB of memory without this, 45 KiB with it).
// Larger sizes too (to 32 KiB) wrote no less and started the module with
// 5 MiB of memory instead of 3.5.
var warm []any

func init() {
	for size := 8; size <= 1<<10; size += size / 8 {
		warm = append(warm, make([]byte, size), make([]*byte, size/8))
	}
}

// Alloc is size bytes aligned to at least align (at most 8), zeroed.
func Alloc(size, align uint32) uint32 {
	if size == 0 {
		return align
	}
	block := make([]uint64, (size+7)/8)
	arena = append(arena, block)
	return uint32(uintptr(unsafe.Pointer(&block[0])))
}

// Reset releases every block; the next collection may reuse them.
func Reset() {
	clear(arena)
	arena = arena[:0]
}

//go:wasmexport cabi_realloc
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	ptr := Alloc(newSize, align)
	if old != 0 && oldSize != 0 {
		copy(Bytes(ptr, min(oldSize, newSize)), Bytes(old, min(oldSize, newSize)))
	}
	return ptr
}

// at is linear memory at addr: in a wasm32 module a Go pointer is an offset.
func at(addr uint32) unsafe.Pointer { return unsafe.Add(nil, uintptr(addr)) }

// Bytes is the memory at ptr, len bytes long, without a copy.
func Bytes(ptr, len uint32) []byte {
	if len == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(at(ptr)), len)
}

// U8 and the others load a value at addr.
func U8(addr uint32) uint8   { return *(*uint8)(at(addr)) }
func U32(addr uint32) uint32 { return *(*uint32)(at(addr)) }
func U64(addr uint32) uint64 { return *(*uint64)(at(addr)) }

// Put8 and the others store a value at addr.
func Put8(addr uint32, v uint8)   { *(*uint8)(at(addr)) = v }
func Put32(addr uint32, v uint32) { *(*uint32)(at(addr)) = v }
func Put64(addr uint32, v uint64) { *(*uint64)(at(addr)) = v }

// String copies the string at ptr out of Berth's arguments.
func String(ptr, len uint32) string { return string(Bytes(ptr, len)) }

// StringAt reads a string's pointer and length at addr.
func StringAt(addr uint32) string { return String(U32(addr), U32(addr+4)) }

// PutString copies s into the arena; its pointer and length.
func PutString(s string) (uint32, uint32) {
	n := uint32(len(s))
	ptr := Alloc(n, 1)
	copy(Bytes(ptr, n), s)
	return ptr, n
}

// PutStringAt stores s's pointer and length at addr.
func PutStringAt(addr uint32, s string) {
	ptr, n := PutString(s)
	Put32(addr, ptr)
	Put32(addr+4, n)
}
