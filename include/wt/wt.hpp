// Everything a trainer or an inference server needs from libwt.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/client.hpp>
#include <wt/dtype.hpp>
#include <wt/engine.hpp>
#include <wt/error.hpp>
#include <wt/init_info.hpp>
#include <wt/log.hpp>
#include <wt/registry.hpp>
#include <wt/trainer_group.hpp>
#include <wt/version.hpp>
#include <wt/weight_source.hpp>
