// wt 0.1.0's path for <wt/sdk/sigbus_guard.hpp>, kept so that backends written against 0.1 build
// unchanged. New code includes <wt/sdk/sigbus_guard.hpp>.
#pragma once

#include <wt/sdk/sigbus_guard.hpp>
