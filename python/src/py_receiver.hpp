// wt.Receiver: the reference receiver in this process, optionally serving vLLM's HTTP routes.
#pragma once

#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>

#include <pybind11/pybind11.h>

#include <memory>

namespace wt::python {

class PyReceiver {
 public:
  PyReceiver(const std::string& backend, pybind11::object options, const std::string& device,
             unsigned load_threads, pybind11::object on_commit = pybind11::none());
  ~PyReceiver();
  Receiver& receiver() { return *receiver_; }
  std::string serve(const std::string& host, int port, const std::string& token);
  void stop();
  std::string url() const { return server_ ? server_->url() : std::string(); }

 private:
  pybind11::object on_commit_;  // outlives receiver_, whose hook borrows it
  std::unique_ptr<Receiver> receiver_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace wt::python
