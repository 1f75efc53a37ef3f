// Deprecated since wt 0.3: the checksums moved into libwt itself (an engine that answers
// /weight_checksums need not link the receiver library). Include <wt/checksum.hpp> instead; this
// header will be removed in a later release.
#pragma once

#include <wt/checksum.hpp>
