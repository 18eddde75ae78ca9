module {
  func.func @nncert(%arg0: !torch.vtensor<[1,1,1],si8>) -> !torch.vtensor<[1,1,1],si8> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n1> : tensor<f32>} : () -> !torch.vtensor<[],f32> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<si8>} : () -> !torch.vtensor<[],si8> 
    %2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n3> : tensor<f32>} : () -> !torch.vtensor<[],f32> 
    %3 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n4> : tensor<si8>} : () -> !torch.vtensor<[],si8> 
    %none = torch.constant.none
    %4 = torch.operator "onnx.DequantizeLinear"(%arg0, %0, %1) : (!torch.vtensor<[1,1,1],si8>, !torch.vtensor<[],f32>, !torch.vtensor<[],si8>) -> !torch.vtensor<[1,1,1],f32> 
    %5 = torch.operator "onnx.LpNormalization"(%4) {torch.onnx.axis = -1 : si64, torch.onnx.p = 2 : si64} : (!torch.vtensor<[1,1,1],f32>) -> !torch.vtensor<[1,1,1],f32> 
    %6 = torch.operator "onnx.QuantizeLinear"(%5, %2, %3) : (!torch.vtensor<[1,1,1],f32>, !torch.vtensor<[],f32>, !torch.vtensor<[],si8>) -> !torch.vtensor<[1,1,1],si8> 
    return %6 : !torch.vtensor<[1,1,1],si8>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n1: "0x08000000839D9B3C",
      n2: "0x0800000092",
      n3: "0x080000000000003C",
      n4: "0x0800000000"
    }
  }
#-}
