package fuel

import (
	"fmt"
	"sort"
)

// inst is one decoded instruction: its opcode and the immediates the rewriter cares about.
type inst struct {
	op     byte
	sub    uint32   // opcode after a 0xFC, 0xFD or 0xFE prefix
	label  uint32   // br, br_if: the label; br_table: the default label
	labels []uint32 // br_table targets (reused between instructions)
	fn     uint32   // call, return_call, ref.func: the function index
	imm    int64    // block, loop, if: the block type; i32.const: the value; local.*: the index
}

// Opcodes the rewriter treats specially or emits.
const (
	opUnreachable   = 0x00
	opBlock         = 0x02
	opLoop          = 0x03
	opIf            = 0x04
	opElse          = 0x05
	opEnd           = 0x0b
	opBr            = 0x0c
	opBrIf          = 0x0d
	opBrTable       = 0x0e
	opReturn        = 0x0f
	opCall          = 0x10
	opCallIndirect  = 0x11
	opReturnCall    = 0x12
	opReturnCallI   = 0x13
	opLocalGet      = 0x20
	opLocalSet      = 0x21
	opLocalTee      = 0x22
	opGlobalGet     = 0x23
	opGlobalSet     = 0x24
	opI32Const      = 0x41
	opI32LtS        = 0x48
	opI32Add        = 0x6a
	opI32Sub        = 0x6b
	opI64Const      = 0x42
	opI64LtS        = 0x53
	opI64ShrU       = 0x88
	opI64ExtendI32U = 0xad
	opI64GeS        = 0x59
	opRefFunc       = 0xd2
	opI64Sub        = 0x7d
	blockEmpty      = 0x40
)

// next decodes the instruction at the start of r, leaving r after it.
func next(r *Reader, in *inst) error {
	op, err := r.Byte()
	if err != nil {
		return err
	}
	in.op, in.sub = op, 0
	switch {
	case op == 0x00 || op == 0x01 || op == opElse || op == opEnd || op == opReturn ||
		op == 0x1a || op == 0x1b || (op >= 0x45 && op <= 0xc4) || op == 0xd1:
		// No immediates: unreachable, nop, else, end, return, drop, select, every numeric
		// instruction including sign extension (0xc0-0xc4), ref.is_null.
		return nil
	case op == opBlock || op == opLoop || op == opIf:
		in.imm, err = r.SLEB(33) // block type: 0x40 (-64), a value type, or a type index
		return err
	case op == opBr || op == opBrIf:
		in.label, err = r.U32()
		return err
	case op == opBrTable:
		return brTable(r, in)
	case op == opCall || op == opReturnCall:
		in.fn, err = r.U32()
		return err
	case op == opCallIndirect || op == opReturnCallI:
		if _, err = r.U32(); err != nil { // type
			return err
		}
		_, err = r.U32() // table
		return err
	case op == 0x1c: // select t*
		return valueTypes(r)
	case op >= opLocalGet && op <= 0x26: // local.*, global.*, table.get, table.set
		v, err := r.U32()
		in.imm = int64(v)
		return err
	case op >= 0x28 && op <= 0x3e: // loads and stores
		return memarg(r)
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		_, err = r.U32()
		return err
	case op == opI32Const:
		in.imm, err = r.SLEB(32)
		return err
	case op == opI64Const:
		_, err = r.SLEB(64)
		return err
	case op == 0x43:
		_, err = r.Take(4)
		return err
	case op == 0x44:
		_, err = r.Take(8)
		return err
	case op == 0xd0: // ref.null heaptype
		_, err = r.SLEB(33)
		return err
	case op == 0xd2: // ref.func
		in.fn, err = r.U32()
		return err
	case op == 0xfc:
		return nextFC(r, in)
	case op == 0xfd:
		return nextFD(r, in)
	case op == 0xfe:
		return nextFE(r, in)
	case op >= 0x06 && op <= 0x0a || op == 0x18 || op == 0x19 || op == 0x1f:
		return errUnsupported{fmt.Sprintf("unsupported opcode 0x%02x (exception handling)", op)}
	case op == 0x14 || op == 0x15 || op == 0xd3 || op == 0xd4 || op == 0xd5 || op == 0xd6:
		return errUnsupported{fmt.Sprintf("unsupported opcode 0x%02x (typed function references)", op)}
	}
	return fmt.Errorf("unknown opcode 0x%02x", op)
}

// brTable decodes the immediates of a br_table: its labels, then its default label.
func brTable(r *Reader, in *inst) error {
	n, err := r.U32()
	if err != nil {
		return err
	}
	if int(n) > len(r.b) {
		return ErrTruncated
	}
	in.labels = in.labels[:0]
	for i := uint32(0); i < n; i++ {
		l, err := r.U32()
		if err != nil {
			return err
		}
		in.labels = append(in.labels, l)
	}
	in.label, err = r.U32()
	return err
}

// valueTypes skips a vector of value types (select t*).
func valueTypes(r *Reader) error {
	n, err := r.U32()
	if err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if _, err := r.SLEB(33); err != nil {
			return err
		}
	}
	return nil
}

// memarg skips a memory argument: alignment (bit 6: a memory index follows) and offset.
func memarg(r *Reader) error {
	align, err := r.U32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.U32(); err != nil {
			return err
		}
	}
	_, err = r.ULEB(64)
	return err
}

// nextFC decodes the 0xFC prefix: saturating truncations, bulk memory, table instructions.
func nextFC(r *Reader, in *inst) error {
	sub, err := r.U32()
	if err != nil {
		return err
	}
	in.sub = sub
	var imms int
	switch {
	case sub <= 7: // i32.trunc_sat_f32_s … i64.trunc_sat_f64_u
		imms = 0
	case sub == 8: // memory.init data mem
		imms = 2
	case sub == 9: // data.drop data
		imms = 1
	case sub == 10: // memory.copy mem mem
		imms = 2
	case sub == 11: // memory.fill mem
		imms = 1
	case sub == 12: // table.init elem table
		imms = 2
	case sub == 13: // elem.drop elem
		imms = 1
	case sub == 14: // table.copy table table
		imms = 2
	case sub >= 15 && sub <= 17: // table.grow, table.size, table.fill
		imms = 1
	default:
		return fmt.Errorf("unknown opcode 0xfc %d", sub)
	}
	for i := 0; i < imms; i++ {
		if _, err := r.U32(); err != nil {
			return err
		}
	}
	return nil
}

// nextFD decodes the 0xFD prefix: fixed-width and relaxed SIMD.
func nextFD(r *Reader, in *inst) error {
	sub, err := r.U32()
	if err != nil {
		return err
	}
	in.sub = sub
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // v128 loads and stores, load32_zero, load64_zero
		return memarg(r)
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		_, err = r.Take(16)
		return err
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		_, err = r.Take(1)
		return err
	case sub >= 84 && sub <= 91: // load*_lane, store*_lane
		if err := memarg(r); err != nil {
			return err
		}
		_, err = r.Take(1)
		return err
	case sub <= 0x113:
		return nil
	}
	return fmt.Errorf("unknown opcode 0xfd %d", sub)
}

// nextFE decodes the 0xFE prefix: the threads proposal's atomics.
func nextFE(r *Reader, in *inst) error {
	sub, err := r.U32()
	if err != nil {
		return err
	}
	in.sub = sub
	switch {
	case sub == 3: // atomic.fence: a zero byte
		_, err = r.Take(1)
		return err
	case sub <= 2 || sub >= 0x10 && sub <= 0x4e:
		return memarg(r)
	}
	return fmt.Errorf("unknown opcode 0xfe %d", sub)
}

// ---- analysis: where to charge, and how much ----

// Charge points are the function entry, every loop header and, in functions with loops, the end
// of every block that a br_table targets — and then also every else, block end and if end that
// paths from different segments reach, so that no path runs past a join without paying for what
// follows it. Each charge point starts a segment; a segment ends where
// the next charge point begins, at a branch to a loop header, or where the function returns. The
// charge of a point is the cost of the longest path through its segment, one unit per instruction
// that does work (block, loop, else, end and nop cost nothing), and at least 1. An inner loop is
// opaque to the segment around it: its body is paid by its own header.
//
// Dispatch loops get cheaper metering. Standard Go compiles every function with jumps into one
// loop that starts with a dispatch — block × n, local.get $pc, br_table — and makes every jump a
// branch back to it: i32.const target; local.set $pc; br loop. Charging each pass through the
// header would charge every jump of the Go code. Instead, the segments of such a loop are the
// br_table's targets in code order, and only backward jumps pay: a jump whose target segment comes
// after the current one cannot repeat without a backward jump (the segment index only grows), so
// the backward jump (or entry) pays for every segment from its target to the end of the loop, once
// each, plus the dispatch for each. Any other branch to the header pays for the whole loop.

const dead = -1 // the cost of a point no path reaches

type frame struct {
	kind     byte  // opBlock, opLoop, opIf, or 0 for the function
	reg      int   // the region the frame's label belongs to (a loop's: the enclosing region)
	acc      int64 // most costly branch to the end of a block or if so far
	ifCost   int64 // cost at the if instruction (its false edge)
	else_    bool
	ifPoint  int           // an if's: the charge point of the segment its condition is in
	from     int           // the charge point of the segment the edges to the end seen so far come from; -1 none
	mixed    bool          // edges to the end come from more than one segment
	dispatch bool          // a br_table targets the end: it is a charge point (or a dispatch segment)
	disp     *dispatchLoop // a loop's: its dispatch, if it is a dispatch loop
	owner    *dispatchLoop // a dispatch block's: its loop
}

// edgeFrom records an edge to the frame's end (or else) from the segment whose charge point is p.
func (f *frame) edgeFrom(p int) {
	switch {
	case f.from < 0:
		f.from = p
	case f.from != p:
		f.mixed = true
	}
}

// dispatchLoop is the state of a dispatch loop being analysed.
type dispatchLoop struct {
	pc     uint32 // the local the dispatch br_table reads
	blocks int    // the dispatch blocks
	depth  int    // len(frames) after the loop's frame was pushed
	table  []int  // br_table entry → target segment (1…blocks), or 0 when not a dispatch block
	seen   bool   // the dispatch br_table was passed
	segs   []int  // point index of each segment's cost (segment 0: the dispatch itself)
	edges  []edge // charges on branches back to the header, filled at the loop's end
	next   []move // forward moves between segments
	entry  int    // point index of the entry charge
}

// segOf returns the segment that starts at the end of the dispatch block at frame index fi.
func (d *dispatchLoop) segOf(fi int) int { return d.depth + d.blocks - fi }

type edge struct {
	point  int
	source int // the segment the branch is in
	target int // first segment the branch may run: 0 when unknown (the whole loop)
}

// move is a forward move from segment from to segment to > from: a fall-through, a forward jump,
// or a branch to the end of a dispatch block. point is the charge point before it, which charges
// only if the move leaves a loop of the Go code (see costs).
type move struct{ from, to, point int }

// addMove records a forward move at instruction ord.
func (a *analysis) addMove(d *dispatchLoop, from, to, ord int) {
	d.next = append(d.next, move{from: from, to: to, point: len(a.points)})
	a.points = append(a.points, point{at: ord, kind: chargeBefore})
}

// region is the current segment of a function body or loop body.
type region struct {
	cur, max int64
	point    int // index of the segment's charge point in analysis.points
}

// Kinds of charge points.
const (
	chargeAfter  = iota // charge after the instruction (entry, loop header, block end)
	chargeBefore        // charge before the instruction (a dispatch loop's entry and back edges)
	chargeNone          // no code: the cost of a dispatch segment, summed into the back edges
)

// point is one charge point: the instruction (ordinal in the body) it goes with, and its charge.
type point struct {
	at     int
	kind   uint8
	charge int64
}

// analysis holds the scratch state of costs (and of the rewriter), reused between functions.
type analysis struct {
	frames    []frame
	regs      []region
	points    []point // in body order; points[0] is the entry
	loops     int
	bulk      bool // the body has a bulk memory or table instruction (sized charge)
	loopDepth int  // the deepest nesting of loops
	dispatchs int
	lead      int // the instructions before this ordinal are all block or loop
	in, peek  inst
	after     []int64 // the rewriter's: the charges due after the current instruction (chargePoints)
	imports   int     // the module's imported functions: a call of one costs HostCallUnits
}

func maxCost(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// free reports whether an instruction does no work of its own.
func free(op byte) bool {
	return op == opBlock || op == opLoop || op == opElse || op == opEnd || op == 0x01
}

// dispatchAt recognises the dispatch of a Go-style loop at the start of r (just after the loop
// instruction): block (empty type) × n, local.get $pc, br_table whose targets are those blocks.
func (a *analysis) dispatchAt(r Reader) *dispatchLoop {
	in := &a.peek
	n := 0
	for {
		if next(&r, in) != nil {
			return nil
		}
		if in.op != opBlock {
			break
		}
		if in.imm != -64 { // 0x40: no params, no results
			return nil
		}
		n++
	}
	if n == 0 || in.op != opLocalGet {
		return nil
	}
	pc := uint32(in.imm)
	if next(&r, in) != nil || in.op != opBrTable {
		return nil
	}
	d := &dispatchLoop{pc: pc, blocks: n}
	for _, l := range append(in.labels, in.label) {
		seg := 0
		if int(l) < n {
			seg = int(l) + 1 // the l-th innermost block ends l-th in code order
		}
		d.table = append(d.table, seg)
	}
	return d
}

// chargeDispatch sets the charges of a dispatch loop once its body has been walked.
//
// The Go code's loops are the backward jumps: a jump from segment s back to t makes [t, s] a
// loop. A forward move from a segment inside a loop to a segment after it leaves that loop: it is
// a barrier, and pays for what follows it. run[x] is the longest run of segments from x on,
// through forward moves that are not barriers, each segment with a pass through the dispatch.
// The entry pays for the longest run from any segment, a backward jump to t pays run[t], a
// barrier to b pays run[b]; every other forward move is free. A run between two charges only
// moves forward without crossing a barrier, so its cost is within the charge before it.
func (a *analysis) chargeDispatch(d *dispatchLoop) {
	disp := a.points[d.segs[0]].charge
	n := len(d.segs)
	// reach[x]: the furthest source of a backward jump whose loop contains x.
	reach := make([]int, n)
	for x := range reach {
		reach[x] = -1
	}
	for _, e := range d.edges {
		lo := e.target
		if lo == 0 {
			lo = 1 // unknown target: any segment up to the source
		}
		for x := lo; x <= e.source && x < n; x++ {
			reach[x] = max(reach[x], e.source)
		}
	}
	barrier := func(m move) bool { return reach[m.from] >= m.from && m.to > reach[m.from] }
	sort.Slice(d.next, func(i, j int) bool { return d.next[i].from > d.next[j].from })
	run := make([]int64, n+1)
	var all int64
	k := 0
	for x := n - 1; x >= 1; x-- {
		var after int64
		for ; k < len(d.next) && d.next[k].from >= x; k++ {
			if m := d.next[k]; m.from == x && m.to > x && m.to < n && !barrier(m) {
				after = maxCost(after, run[m.to])
			}
		}
		run[x] = disp + a.points[d.segs[x]].charge + after
		all = maxCost(all, run[x])
	}
	a.points[d.entry].charge = maxCost(1, all)
	for _, e := range d.edges {
		c := all
		if e.target > 0 && e.target < n {
			c = run[e.target]
		}
		a.points[e.point].charge = maxCost(1, c)
	}
	for _, m := range d.next {
		if barrier(m) && m.to < n {
			a.points[m.point].charge = maxCost(1, run[m.to])
		}
	}
}

// costs walks a function body's instructions (r is positioned after the locals) and fills
// a.points. With dispatch, the ends of br_table targets are charge points too, and dispatch
// loops are recognised.
func (a *analysis) costs(r *Reader, dispatch bool) error {
	a.frames = append(a.frames[:0], frame{kind: 0, acc: dead})
	a.points = append(a.points[:0], point{at: -1})
	a.regs = append(a.regs[:0], region{point: 0})
	a.loops, a.dispatchs, a.bulk, a.loopDepth = 0, 0, false, 0
	a.lead = 0
	in := &a.in
	s := step{dispatch: dispatch}
	for ord := 0; ; ord++ {
		s.prev2, s.prev1 = s.prev1, recent{op: in.op, imm: in.imm}
		if err := next(r, in); err != nil {
			return err
		}
		a.account(&s, ord)
		switch in.op {
		case opBlock, opIf:
			a.frames = append(a.frames, frame{kind: in.op, reg: len(a.regs) - 1, acc: dead, ifCost: s.top.cur, ifPoint: s.top.point, from: -1})
		case opLoop:
			a.openLoop(r, ord, dispatch)
		case opElse:
			if err := a.elseArm(&s); err != nil {
				return err
			}
		case opEnd:
			if len(a.frames) == 1 { // the function's end
				a.frames = a.frames[:0]
				if len(r.b) != 0 {
					return fmt.Errorf("%d bytes after the end of the function", len(r.b))
				}
				a.close(s.top)
				return nil
			}
			a.end(&s)
		case opBr:
			if err := a.branch(&s, in.label, false); err != nil {
				return err
			}
			s.top.cur = dead
		case opBrIf:
			if err := a.branch(&s, in.label, false); err != nil {
				return err
			}
		case opBrTable:
			for _, l := range in.labels {
				if err := a.branch(&s, l, true); err != nil {
					return err
				}
			}
			if err := a.branch(&s, in.label, true); err != nil {
				return err
			}
			if s.inner != nil {
				s.inner.seen = true
			}
			s.top.cur = dead
		case opReturn, opUnreachable, opReturnCall, opReturnCallI:
			s.top.cur = dead
		}
	}
}

// step is what costs knows of the instruction it is at (a.in).
type step struct {
	ord      int           // the instruction's ordinal in the body
	top      *region       // the current segment, already charged for the instruction
	live     bool          // some path reaches the instruction
	inner    *dispatchLoop // the dispatch loop whose segment the instruction is in, if any
	dispatch bool          // the pass that recognises dispatch loops (costs)
	// prev1 and prev2 are the two instructions before, for the Go jump idiom.
	prev1, prev2 recent
}

// recent is what costs keeps of an instruction it has passed.
type recent struct {
	op  byte
	imm int64
}

// account counts the instruction at ordinal ord (a.in) into the function's figures and the
// current segment's cost, and sets the step its own handling starts from (s: the step of the
// instruction before, and its prev1 and prev2 already set).
func (a *analysis) account(s *step, ord int) {
	in := &a.in
	if bulkShift(in) >= 0 {
		a.bulk = true
	}
	if a.lead == ord && (in.op == opBlock || in.op == opLoop) {
		a.lead++
	}
	top := &a.regs[len(a.regs)-1]
	a.loopDepth = max(a.loopDepth, len(a.regs)-1) // the loops around this instruction
	live := top.cur != dead
	if live && !free(in.op) {
		top.cur += a.cost(in)
		top.max = maxCost(top.max, top.cur)
	}
	s.ord, s.top, s.live, s.inner = ord, top, live, nil
	for k := len(a.frames) - 1; k > 0 && len(a.regs) > 1; k-- {
		if a.frames[k].kind == opLoop {
			s.inner = a.frames[k].disp
			break
		}
	}
}

// cost is what the instruction in costs: HostCallUnits for a call (or tail call) of an imported
// function, one unit otherwise.
func (a *analysis) cost(in *inst) int64 {
	if (in.op == opCall || in.op == opReturnCall) && int(in.fn) < a.imports {
		return HostCallUnits
	}
	return 1
}

// close sets the charge of the segment g.
func (a *analysis) close(g *region) {
	a.points[g.point].charge = maxCost(1, g.max)
}

// join starts a new segment at the current instruction, a point where paths from different
// segments meet (an else or the end of a block or if): the cost of each path so far was charged
// by the segment it came through, and what follows must be charged where every path passes.
// Adding one path's cost to the other's segment would let the first skip the charge.
func (a *analysis) join(s *step) {
	a.close(s.top)
	*s.top = region{point: len(a.points)}
	a.points = append(a.points, point{at: s.ord, kind: chargeAfter})
}

// openLoop opens the loop at ordinal ord (r is after the loop instruction): a region of its own,
// charged at its header, or, for a dispatch loop, its entry charge and the dispatch segment.
func (a *analysis) openLoop(r *Reader, ord int, dispatch bool) {
	var d *dispatchLoop
	if dispatch {
		d = a.dispatchAt(*r)
	}
	a.frames = append(a.frames, frame{kind: opLoop, reg: len(a.regs) - 1, disp: d})
	a.loops++
	if d == nil {
		a.regs = append(a.regs, region{point: len(a.points)})
		a.points = append(a.points, point{at: ord})
		return
	}
	a.dispatchs++
	d.depth = len(a.frames)
	d.entry = len(a.points)
	a.points = append(a.points, point{at: ord, kind: chargeBefore})
	d.segs = append(d.segs, len(a.points))
	a.regs = append(a.regs, region{point: len(a.points)})
	a.points = append(a.points, point{at: ord, kind: chargeNone})
}

// elseArm ends the then-arm of the innermost if and starts its else-arm.
func (a *analysis) elseArm(s *step) error {
	f := &a.frames[len(a.frames)-1]
	if f.kind != opIf || f.else_ {
		return fmt.Errorf("else without if")
	}
	top := s.top
	f.acc = maxCost(f.acc, top.cur)
	if top.cur != dead {
		f.edgeFrom(top.point)
	}
	f.else_ = true
	if top.point != f.ifPoint && f.ifCost != dead {
		// The then-arm started a segment of its own: the else-arm is reached from the
		// condition's segment, which that segment's charge does not cover.
		a.join(s)
		return nil
	}
	top.cur = f.ifCost
	return nil
}

// end closes the innermost block, if or loop (not the function's own frame).
func (a *analysis) end(s *step) {
	f := a.frames[len(a.frames)-1]
	a.frames = a.frames[:len(a.frames)-1]
	top := s.top
	switch f.kind {
	case opBlock, opIf:
		if f.dispatch {
			a.endDispatchBlock(s, &f)
			return
		}
		if f.kind == opIf && !f.else_ && f.ifCost != dead {
			f.acc = maxCost(f.acc, f.ifCost)
			f.edgeFrom(f.ifPoint)
		}
		if top.cur != dead {
			f.edgeFrom(top.point)
		}
		if f.mixed || f.from >= 0 && f.from != top.point {
			a.join(s)
			return
		}
		top.cur = maxCost(top.cur, f.acc)
		top.max = maxCost(top.max, top.cur)
	case opLoop:
		a.close(top)
		fell := top.cur != dead
		a.regs = a.regs[:len(a.regs)-1]
		if outer := &a.regs[len(a.regs)-1]; !fell {
			outer.cur = dead
		}
		if d := f.disp; d != nil {
			a.chargeDispatch(d)
		}
	}
}

// endDispatchBlock ends a block a br_table targets: a new segment starts after its end,
// whatever the path into it (a segment of its dispatch loop if it has one).
func (a *analysis) endDispatchBlock(s *step, f *frame) {
	kind := uint8(chargeAfter)
	if d := f.owner; d != nil {
		kind = chargeNone
		if s.top.cur != dead {
			a.addMove(d, len(d.segs)-1, len(d.segs), s.ord)
		}
		d.segs = append(d.segs, len(a.points))
	}
	a.close(s.top)
	*s.top = region{point: len(a.points)}
	a.points = append(a.points, point{at: s.ord, kind: kind})
}

// branch records a branch to label l of the instruction at s (table: from a br_table).
func (a *analysis) branch(s *step, l uint32, table bool) error {
	if int(l) >= len(a.frames) {
		return fmt.Errorf("branch depth %d out of range", l)
	}
	fi := len(a.frames) - 1 - int(l)
	t := &a.frames[fi]
	if t.owner != nil && s.live && len(t.owner.segs) > 1 {
		// Straight to the start of a later segment of a dispatch loop.
		d := t.owner
		a.addMove(d, len(d.segs)-1, d.segOf(fi), s.ord)
	}
	if t.kind == opLoop && t.disp != nil {
		a.branchToDispatch(s, t.disp)
		return nil
	}
	if t.kind != opBlock && t.kind != opIf {
		return nil // a loop header or the function's exit: the segment ends
	}
	if table && s.dispatch && (s.inner == nil || !s.inner.seen) {
		t.dispatch = true
		if inner := s.inner; inner != nil && fi >= inner.depth && fi < inner.depth+inner.blocks {
			t.owner = inner
		}
	}
	if s.live {
		t.acc = maxCost(t.acc, a.regs[t.reg].cur)
		t.edgeFrom(a.regs[t.reg].point)
	}
	return nil
}

// branchToDispatch records a branch back to the header of the dispatch loop d: a forward jump of
// the Go code (i32.const target; local.set $pc; br) is a move, paid by the backward jump or entry
// before it; any other branch is a back edge, charged before it.
func (a *analysis) branchToDispatch(s *step, d *dispatchLoop) {
	in, prev1, prev2 := &a.in, s.prev1, s.prev2
	target := 0
	if in.op == opBr && prev1.op == opLocalSet && uint32(prev1.imm) == d.pc && prev2.op == opI32Const && s.inner == d {
		if k := uint64(uint32(prev2.imm)); k < uint64(len(d.table)) {
			target = d.table[k]
		} else {
			target = d.table[len(d.table)-1]
		}
		if cur := len(d.segs) - 1; target > cur {
			// A forward jump: paid by the backward jump or entry before it.
			if s.live {
				a.addMove(d, cur, target, s.ord)
			}
			return
		}
	}
	d.edges = append(d.edges, edge{point: len(a.points), source: len(d.segs) - 1, target: target})
	a.points = append(a.points, point{at: s.ord, kind: chargeBefore})
}

// ---- rewriting ----

// instrumentCode rewrites the code section.
func instrumentCode(m *module, s section, gidx uint32, res *Result) ([]byte, error) {
	r := &Reader{b: s.body, base: s.off}
	n, err := r.U32()
	if err != nil {
		return nil, err
	}
	if int(n) != len(m.funcTypes)-m.importedFuncs {
		return nil, fmt.Errorf("code section has %d bodies for %d functions", n, len(m.funcTypes)-m.importedFuncs)
	}
	out := make([]byte, 0, len(s.body)+len(s.body)/4)
	out = appendU32(out, n)
	var (
		a    = analysis{imports: m.importedFuncs}
		body []byte
	)
	for k := uint32(0); k < n; k++ {
		fn := m.importedFuncs + int(k)
		size, err := r.U32()
		if err != nil {
			return nil, wrapErr(err, r.Offset(), fn)
		}
		off := r.Offset()
		b, err := r.Take(int(size))
		if err != nil {
			return nil, &Error{Offset: off, Func: fn, Reason: "body runs past the end of the code section"}
		}
		body, err = instrumentFunc(m, &a, fn, b, off, gidx, body[:0], res)
		if err != nil {
			return nil, err
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

// instrumentFunc appends the metered body of function fn (b, at offset off) to out.
func instrumentFunc(m *module, a *analysis, fn int, b []byte, off int, gidx uint32, out []byte, res *Result) ([]byte, error) {
	t := m.funcTypes[fn]
	if int(t) >= len(m.typeParams) {
		return nil, &Error{Offset: off, Func: fn, Reason: fmt.Sprintf("type index %d out of range", t)}
	}
	r := &Reader{b: b, base: off}
	locals, err := readLocals(r, m.typeParams[t])
	if err != nil {
		return nil, wrapErr(err, r.Offset(), fn)
	}
	if locals.n >= 1<<32-2 {
		return nil, &Error{Offset: off, Func: fn, Reason: "too many locals"}
	}
	code := r.b
	codeOff := r.Offset()
	if err := a.analyze(code, codeOff); err != nil {
		return nil, wrapErr(err, codeOff, fn)
	}
	w := newRewriter(m, a, locals.n, gidx)
	// Locals: the new ones go after the parameters and every declared local.
	out = w.appendLocals(out, locals.groups, b[locals.start:locals.end])
	res.Functions++
	res.Loops += a.loops
	out = w.enter(out)
	if w.cached {
		out = w.reload(out)
	}
	points := a.points
	if len(points) > 1 && points[1].kind == chargeBefore && points[1].at < a.lead {
		// A dispatch loop the function enters before doing anything: one charge at its
		// entry pays for both.
		points[1].charge += points[0].charge
	} else {
		out = w.charge(out, points[0].charge)
	}
	return w.rewriteBody(out, &Reader{b: code, base: codeOff}, fn, res)
}

// localDecls is where a function body declares its locals.
type localDecls struct {
	groups     uint32 // the number of local groups
	n          uint64 // params and locals
	start, end int    // the groups' bytes in the body, after their count
}

// readLocals reads the local declarations at the start of a function body (r), whose type has
// params parameters, and leaves r at the function's code.
func readLocals(r *Reader, params int) (localDecls, error) {
	l := localDecls{n: uint64(params)}
	all := len(r.b)
	groups, err := r.U32()
	if err != nil {
		return l, err
	}
	l.groups, l.start = groups, all-len(r.b)
	for g := uint32(0); g < groups; g++ {
		c, err := r.U32()
		if err != nil {
			return l, err
		}
		if _, err := r.SLEB(33); err != nil {
			return l, err
		}
		l.n += uint64(c)
	}
	l.end = all - len(r.b)
	return l, nil
}

// analyze finds a function's charge points (code, at offset codeOff): a first pass, then, if
// the function has loops, a second one with the charge points that only pay off where code
// repeats (dispatch loops, br_table targets).
func (a *analysis) analyze(code []byte, codeOff int) error {
	if err := a.costs(&Reader{b: code, base: codeOff}, false); err != nil {
		return err
	}
	if a.loops > 0 {
		return a.costs(&Reader{b: code, base: codeOff}, true)
	}
	return nil
}

// rewriter writes the metered code of one function: where its counters are and how it charges.
type rewriter struct {
	m        *module
	a        *analysis // the function's charge points
	gidx     uint32    // the fuel counter, a global
	sidx     uint32    // the stack counter, a global
	local    uint32    // an i64 local: the counter while it is cached, a scratch copy otherwise
	size     uint32    // an i32 local: the size operand of a bulk instruction, when the body has one
	stack    uint32    // an i32 local: the stack counter as the function left it at its entry, less its frame (see enter)
	sliceIdx uint32    // the slice import, after the module's own imports
	frame    int32     // the frame's stack units
	// cached: the counter is kept in local while the function runs (see newRewriter).
	cached bool

	depth    int     // open blocks, loops and ifs
	p        int     // the next charge point
	remapped [6]byte // scratch for a call or ref.func whose function index moves (remap)
}

// newRewriter returns the rewriter of a function with nlocals params and locals, analysed in a.
func newRewriter(m *module, a *analysis, nlocals uint64, gidx uint32) rewriter {
	local := uint32(nlocals)
	w := rewriter{
		m: m, a: a, gidx: gidx, sidx: gidx + 1, local: local, size: local + 1, stack: local + 1,
		sliceIdx: uint32(m.importedFuncs), frame: FrameUnits(nlocals), p: 1,
		// Keep the counter in the local where loops run, but not in Go-style functions: they
		// call other functions on most paths, and their dispatch loops charge only backward
		// jumps. Nor where loops nest deeper than real code does: the local is a variable every
		// loop changes, which the compiler carries through every loop header, and its time grows
		// with the square of the depth (10,000 nested loops: 71 s to compile instead of 5.5 s);
		// the global is not.
		cached: a.loops > 0 && a.dispatchs == 0 && a.loopDepth <= maxCachedLoopDepth,
	}
	if a.bulk {
		w.stack++
	}
	return w
}

// appendLocals appends the function's local declarations: its own groups (decls, after their
// count), then the counter's i64, the size operand's i32 when the body has a bulk instruction,
// and the stack counter's i32.
func (w *rewriter) appendLocals(out []byte, groups uint32, decls []byte) []byte {
	if w.a.bulk {
		out = appendU32(out, groups+3)
	} else {
		out = appendU32(out, groups+2)
	}
	out = append(out, decls...)
	out = append(out, 1, 0x7e) // one i64
	if w.a.bulk {
		out = append(out, 1, 0x7f) // one i32
	}
	return append(out, 1, 0x7f) // one i32
}

// enter pays the frame at the function's entry: the stack counter goes down by the frame's
// units, and a negative counter traps (the host tells it from other traps by the counter it
// reads back). The counter goes back up when the function returns: not here, at every exit, but
// in its caller, which restores what it kept in its own stack local after each call returns
// (restore). A tail call gives the frame back first, since the callee replaces it.
func (w *rewriter) enter(out []byte) []byte {
	out = append(out, opGlobalGet)
	out = appendU32(out, w.sidx)
	out = append(out, opI32Const)
	out = appendS64(out, int64(w.frame))
	out = append(out, opI32Sub, opLocalTee)
	out = appendU32(out, w.stack)
	out = append(out, opGlobalSet)
	out = appendU32(out, w.sidx)
	out = append(out, opLocalGet)
	out = appendU32(out, w.stack)
	return append(out, opI32Const, 0, opI32LtS, opIf, blockEmpty, opUnreachable, opEnd)
}

// restore sets the stack counter back to what it was after the entry (after a call).
func (w *rewriter) restore(out []byte) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, w.stack)
	out = append(out, opGlobalSet)
	return appendU32(out, w.sidx)
}

// giveBackFrame adds the frame's units back to the stack counter (before a tail call).
func (w *rewriter) giveBackFrame(out []byte) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, w.stack)
	out = append(out, opI32Const)
	out = appendS64(out, int64(w.frame))
	out = append(out, opI32Add, opGlobalSet)
	return appendU32(out, w.sidx)
}

// flush stores the cached counter in the global.
func (w *rewriter) flush(out []byte) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, w.local)
	out = append(out, opGlobalSet)
	return appendU32(out, w.gidx)
}

// reload caches the global counter in the local.
func (w *rewriter) reload(out []byte) []byte {
	out = append(out, opGlobalGet)
	out = appendU32(out, w.gidx)
	out = append(out, opLocalSet)
	return appendU32(out, w.local)
}

// charge subtracts c from the counter. When it goes negative the function calls the slice
// import with the counter's value and goes on with the counter it returns: the host hands out
// the call's budget one slice at a time, and gets control back at the end of each (Meter). A
// negative counter back from the host is the end of the budget: it is stored (the host sees a
// negative value) and the function traps. The test is "if ≥ 0 then nothing else refill": the
// runtime lays the then-arm out first, so the common case falls through (the inverse form costs
// a taken branch per charge: +15 % instead of +5 % on a Go tokenizer).
func (w *rewriter) charge(out []byte, c int64) []byte {
	out = w.counter(out)
	out = append(out, opI64Const)
	out = appendS64(out, c)
	return w.subtract(out)
}

// chargeSize charges a bulk instruction by its size operand, the i32 on top of the stack,
// shifted right by shift: the operand is kept in the size local and left on the stack.
func (w *rewriter) chargeSize(out []byte, shift int) []byte {
	out = append(out, opLocalTee)
	out = appendU32(out, w.size)
	out = w.counter(out)
	out = append(out, opLocalGet)
	out = appendU32(out, w.size)
	out = append(out, opI64ExtendI32U)
	if shift > 0 {
		out = append(out, opI64Const, byte(shift), opI64ShrU)
	}
	return w.subtract(out)
}

// counter pushes the counter, the start of a charge (charge, chargeSize).
func (w *rewriter) counter(out []byte) []byte {
	if w.cached {
		out = append(out, opLocalGet)
		return appendU32(out, w.local)
	}
	out = append(out, opGlobalGet)
	return appendU32(out, w.gidx)
}

// subtract ends a charge: it subtracts the i64 on top of the stack from the counter below it,
// stores the result, and calls the slice import when it is negative (see charge).
func (w *rewriter) subtract(out []byte) []byte {
	if !w.cached {
		out = append(out, opI64Sub, opLocalTee)
		out = appendU32(out, w.local)
		out = append(out, opGlobalSet)
		out = appendU32(out, w.gidx)
		out = append(out, opLocalGet)
		out = appendU32(out, w.local)
		out = append(out, opI64Const, 0, opI64GeS, opIf, blockEmpty, opElse)
		out = w.slice(out)
		out = append(out, opGlobalSet)
		out = appendU32(out, w.gidx)
		out = append(out, opLocalGet)
		out = appendU32(out, w.local)
		return append(out, opI64Const, 0, opI64LtS, opIf, blockEmpty, opUnreachable, opEnd, opEnd)
	}
	out = append(out, opI64Sub, opLocalTee)
	out = appendU32(out, w.local)
	out = append(out, opI64Const, 0, opI64GeS, opIf, blockEmpty, opElse)
	out = w.slice(out)
	out = append(out, opI64Const, 0, opI64LtS, opIf, blockEmpty)
	out = w.flush(out)
	return append(out, opUnreachable, opEnd, opEnd)
}

// slice calls the slice import with the counter and keeps the counter it returns in the local,
// leaving it on the stack.
func (w *rewriter) slice(out []byte) []byte {
	out = append(out, opLocalGet)
	out = appendU32(out, w.local)
	out = append(out, opCall)
	out = appendU32(out, w.sliceIdx)
	out = append(out, opLocalTee)
	return appendU32(out, w.local)
}

// rewriteBody appends the function's instructions (cr: its code), each with the charges of its
// charge points and the counter and stack bookkeeping around it, to out.
func (w *rewriter) rewriteBody(out []byte, cr *Reader, fn int, res *Result) ([]byte, error) {
	in := &w.a.in
	for ord := 0; len(cr.b) > 0; ord++ {
		start := cr.b
		if err := next(cr, in); err != nil {
			return nil, wrapErr(err, cr.Offset(), fn)
		}
		raw := w.remap(in, start[:len(start)-len(cr.b)])
		// A call that may run guest code: the counter is restored when it returns. (A host
		// function leaves it as it is.)
		guestCall := in.op == opCallIndirect || in.op == opCall && int(in.fn) >= w.m.importedFuncs
		out = w.chargePoints(out, ord, res)
		if len(w.a.after) > 0 {
			switch in.op {
			case opLoop:
				w.depth++
			case opEnd:
				w.depth--
			}
			out = append(out, raw...)
			if guestCall {
				out = w.restore(out)
			}
			for _, c := range w.a.after {
				out = w.charge(out, c)
			}
			continue
		}
		var done bool
		if out, done = w.around(out, in, raw, guestCall); done {
			continue
		}
		if shift := bulkShift(in); shift >= 0 {
			out = w.chargeSize(out, shift)
			res.Sized++
		}
		out = append(out, raw...)
		if guestCall {
			out = w.restore(out)
		}
	}
	return out, nil
}

// remap returns the bytes of the instruction in (raw), with its function index moved up by one
// (the slice import) if it names a defined function.
func (w *rewriter) remap(in *inst, raw []byte) []byte {
	if (in.op == opCall || in.op == opReturnCall || in.op == opRefFunc) && int(in.fn) >= w.m.importedFuncs {
		raw = appendU32(append(w.remapped[:0], in.op), w.m.fn(in.fn))
	}
	return raw
}

// chargePoints appends the charges due before the instruction at ordinal ord and sets a.after
// to those due after it.
func (w *rewriter) chargePoints(out []byte, ord int, res *Result) []byte {
	points := w.a.points
	w.a.after = w.a.after[:0]
	for ; w.p < len(points) && points[w.p].at == ord; w.p++ {
		switch points[w.p].kind {
		case chargeBefore:
			if points[w.p].charge > 0 { // a forward move that is no barrier costs nothing
				out = w.charge(out, points[w.p].charge)
				res.Points++
			}
		case chargeAfter:
			w.a.after = append(w.a.after, points[w.p].charge)
			res.Points++
		}
	}
	return out
}

// around appends the counter bookkeeping an instruction without charges after it needs before
// it: the cached counter stored at every exit and around every call (reloaded after it), the
// frame given back before a tail call. It returns true when it has appended the instruction
// itself (a call, with a cached counter).
func (w *rewriter) around(out []byte, in *inst, raw []byte, guestCall bool) ([]byte, bool) {
	switch in.op {
	case opBlock, opIf, opLoop:
		w.depth++
	case opEnd:
		if w.depth == 0 && w.cached {
			out = w.flush(out)
		}
		w.depth--
	case opCall, opCallIndirect:
		// Around a host function too: it may charge the call for the bytes it copies, from
		// the global (modrt).
		if w.cached {
			out = w.flush(out)
			out = append(out, raw...)
			out = w.reload(out)
			if guestCall {
				out = w.restore(out)
			}
			return out, true
		}
	case opReturn, opReturnCall, opReturnCallI:
		if w.cached {
			out = w.flush(out)
		}
		if in.op != opReturn {
			// The callee replaces this frame: its units go back first.
			out = w.giveBackFrame(out)
		}
	case opBr, opBrIf:
		if w.cached && int(in.label) == w.depth {
			out = w.flush(out)
		}
	case opBrTable:
		if w.cached && w.exits(in) {
			out = w.flush(out)
		}
	}
	return out, false
}

// exits reports whether the br_table in may branch to the function's end.
func (w *rewriter) exits(in *inst) bool {
	exits := int(in.label) == w.depth
	for _, l := range in.labels {
		exits = exits || int(l) == w.depth
	}
	return exits
}

// maxCachedLoopDepth is the deepest loop nesting of a function that keeps its counter in a
// local (real code nests loops a few deep: 4 in the Rust examples).
const maxCachedLoopDepth = 16

// Sized charges: a bulk instruction pays for its size operand as well as its one unit: a unit
// per byte of memory and per table element. Measured (modrt's TestSizedChargesStopLoops on a
// shared 2-core machine): a plain loop spends 10^8 units in 44 ms, 0.44 ns per unit; memory.fill
// and memory.copy of 16-32 MiB take 0.5-0.6 ns per byte on memory touched for the first time
// (0.05 once it is mapped, 0.01 within the cache); table.fill and table.copy 0.1-0.2 ns per
// element. A byte is priced as a unit so that no shape is cheaper than a plain loop.
const (
	memoryShift = 0 // log2 of the bytes per unit
	tableShift  = 0 // log2 of the elements per unit
)

// bulkShift returns the shift that turns the size operand of a bulk instruction into fuel
// units, or -1 when in is not one.
func bulkShift(in *inst) int {
	if in.op != 0xfc {
		return -1
	}
	switch in.sub {
	case 8, 10, 11: // memory.init, memory.copy, memory.fill
		return memoryShift
	case 12, 14, 17: // table.init, table.copy, table.fill
		return tableShift
	}
	return -1
}
