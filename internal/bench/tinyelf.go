package bench

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	goruntime "runtime"
)

// tinyELF is the smallest static program there is: one page-aligned
// segment whose code makes a single exit(code) system call, no libc, no
// loader, no page beyond its own. Spawned inside a sandbox it is gVisor's
// floor for starting any process (clone, execve of a tiny image, exit,
// wait), the anchor of the exec figure. It is built for the host's
// architecture, which is the sandbox's.
func tinyELF(code byte) ([]byte, error) {
	var text []byte
	var machine elf.Machine
	switch goruntime.GOARCH {
	case "amd64":
		machine = elf.EM_X86_64
		// mov edi, code; mov eax, 60 (exit); syscall
		text = []byte{0xbf, code, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05}
	case "arm64":
		machine = elf.EM_AARCH64
		// movz x0, #code; movz x8, #93 (exit); svc #0
		movz := func(reg, imm uint32) []byte { return binary.LittleEndian.AppendUint32(nil, 0xd2800000|imm<<5|reg) }
		text = append(append(movz(0, uint32(code)), movz(8, 93)...), 0x01, 0x00, 0x00, 0xd4)
	default:
		return nil, fmt.Errorf("no tiny static program for %s", goruntime.GOARCH)
	}
	const base = 0x400000
	hdrSize := uint64(binary.Size(elf.Header64{}) + binary.Size(elf.Prog64{}))
	size := hdrSize + uint64(len(text))
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: base + hdrSize, Phoff: uint64(binary.Size(elf.Header64{})),
		Ehsize: uint16(binary.Size(elf.Header64{})), Phentsize: uint16(binary.Size(elf.Prog64{})), Phnum: 1,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	p := elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x1000,
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, p)
	b.Write(text)
	return b.Bytes(), nil
}
