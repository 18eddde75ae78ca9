module {
  func.func @nncert(%arg0: !torch.vtensor<[4096,1],f32>) -> !torch.vtensor<[4096,1],f32> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n1> : tensor<4xsi64>} : () -> !torch.vtensor<[4],si64> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<2xsi64>} : () -> !torch.vtensor<[2],si64> 
    %none = torch.constant.none
    %2 = torch.operator "onnx.Reshape"(%arg0, %0) : (!torch.vtensor<[4096,1],f32>, !torch.vtensor<[4],si64>) -> !torch.vtensor<[4096,1,1,1],f32> 
    %3 = torch.operator "onnx.LRN"(%2) {torch.onnx.alpha = 0x4CC00000 : f32, torch.onnx.beta = 5.000000e-01 : f32, torch.onnx.bias = 1.000000e+00 : f32, torch.onnx.size = 33554433 : si64} : (!torch.vtensor<[4096,1,1,1],f32>) -> !torch.vtensor<[4096,1,1,1],f32> 
    %4 = torch.operator "onnx.Reshape"(%3, %1) : (!torch.vtensor<[4096,1,1,1],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[4096,1],f32> 
    return %4 : !torch.vtensor<[4096,1],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n1: "0x080000000010000000000000010000000000000001000000000000000100000000000000",
      n2: "0x0800000000100000000000000100000000000000"
    }
  }
#-}
