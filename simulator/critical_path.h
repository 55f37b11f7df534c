// simulator/critical_path.h — the critical path of a simulated step across ranks and streams: from the slice that
// ends the step, back through what each slice waited for (SimSpan::dep, recorded by the scheduler), to the
// step's start.
//
// A stall on the path (waiting for a collective, a receive, the other stages) is replaced by what it waited
// for, so the path is made of work: kernels (attributed to their kernel class, their launch overhead apart as
// "launch overhead"), collectives (to
// "communication <group>"), pipeline sends ("pipeline <group>") and the time the host held the device ("host").
// Where a slice started later than what it waited for ended (a gap no slice explains), the gap is its own
// segment attributed to the dependency's kind ("waiting: <kind>"). The segments tile [0, the step's end].
#pragma once
#include <vector>

#include "simulator/result.h"

namespace titan {

// `lanes`: each scheduled lane's spans (SpanRef::lane indexes this list).
CriticalPath critical_path(const std::vector<const Timeline*>& lanes);

// One line: the path's length and its shares by attribution and by lane (stage).
std::string describe_critical_path(const CriticalPath& p);

}  // namespace titan
