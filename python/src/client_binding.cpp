// wt.HttpClient: vLLM's HTTP weight-sync client (and wt serve's extras), every call with the GIL
// released.
#include "bindings.hpp"
#include "py_json.hpp"

#include <wt/services/http_client.hpp>

#include <pybind11/stl.h>

namespace wt::python {

void bind_clients(py::module_& m) {
  using R = py::gil_scoped_release;
  py::class_<HttpClient>(m, "HttpClient",
                         "vLLM's HTTP weight-sync client: POSTs the four calls to base_url.")
      .def(py::init([](const std::string& url, const std::string& token, double timeout_s) {
             HttpClient::Options o;
             o.bearer_token = token;
             o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
             return std::make_unique<HttpClient>(url, o);
           }),
           py::arg("base_url"), py::arg("token") = "", py::arg("timeout_s") = 300.0)
      .def_property_readonly("base_url", &HttpClient::base_url)
      .def("init_weight_transfer_engine",
           [](HttpClient& c, py::object info) {
             const std::string text = json_text(info, "the payload");
             R r;
             c.init_weight_transfer_engine(text);
           })
      .def("start_weight_update", &HttpClient::start_weight_update, py::call_guard<R>())
      .def("update_weights",
           [](HttpClient& c, py::object info) {
             const std::string text = json_text(info, "the payload");
             R r;
             c.update_weights(text);
           })
      .def("finish_weight_update", &HttpClient::finish_weight_update,
           py::arg("weight_version") = py::none(), py::call_guard<R>())
      .def("end_weight_update", &HttpClient::end_weight_update, py::arg("reason") = "",
           py::call_guard<R>())
      .def("abort_calls", &HttpClient::abort_calls, py::call_guard<R>())
      .def("world_size", &HttpClient::world_size, py::call_guard<R>())
      .def("weight_checksums", &HttpClient::weight_checksums, py::call_guard<R>())
      .def("get", [](HttpClient& c, const std::string& path) {
        nlohmann::json j;
        {
          R r;
          j = c.get(path);
        }
        return from_json_text(j.dump());
      });
}

}  // namespace wt::python
