// wt 0.1.0's path for <wt/sdk/parallel_copy.hpp>, kept so that backends written against 0.1 build
// unchanged. New code includes <wt/sdk/parallel_copy.hpp>.
#pragma once

#include <wt/sdk/parallel_copy.hpp>
